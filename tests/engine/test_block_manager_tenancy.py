"""engine/host/block_manager.py with many tenants: isolation salts partition the prefix cache
(engine/host/tenancy.py), and the freed pages of live sessions are evicted after every other
free page until their session expires (engine/host/sessions.py)."""

from __future__ import annotations

from engine.host.block_manager import BlockManager
from engine.host.request import Request, StopCriteria
from engine.host.sequence import Sequence

PAGE = 4
TTL = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_seq(token_ids: list[int], request_id: str = "r", isolation: bytes = b"", session: str | None = None
             ) -> Sequence:
    """A sequence made the way the engine makes one, from a Request with tenancy fields."""
    request = Request(request_id, token_ids, stop=StopCriteria(), cache_isolation=isolation, session=session)
    return Sequence.from_request(request, seed=0)


def run(manager: BlockManager, token_ids: list[int], request_id: str = "r", isolation: bytes = b"",
        session: str | None = None, free: bool = True) -> tuple[Sequence, int]:
    """Admit a sequence, compute every token, free it (unless told not to); (it, its prefix hits)."""
    seq = make_seq(token_ids, request_id, isolation, session)
    hits = manager.allocate(seq)
    manager.append(seq, seq.num_uncomputed_tokens)
    seq.num_computed_tokens = seq.num_tokens
    manager.mark_computed(seq)
    if free:
        manager.free(seq)
    return seq, hits


def test_isolation_salts_give_disjoint_pages_for_the_same_tokens():
    manager = BlockManager(num_pages=32, page_size=PAGE)
    prompt = list(range(1, 14))  # 3 full pages before the last token
    a, _ = run(manager, prompt, "a", isolation=b"tenant-a", free=False)
    b, hits_b = run(manager, prompt, "b", isolation=b"tenant-b", free=False)
    shared, hits_shared = run(manager, prompt, "shared", free=False)
    assert hits_b == 0 and hits_shared == 0
    assert not set(a.block_table) & set(b.block_table)
    assert not set(a.block_table) & set(shared.block_table) and not set(b.block_table) & set(shared.block_table)
    assert len({tuple(seq.block_hashes) for seq in (a, b, shared)}) == 3
    again, hits_again = run(manager, prompt, "a2", isolation=b"tenant-a", free=False)
    assert hits_again == 3 * PAGE and again.block_table[:3] == a.block_table[:3]  # the same key shares
    for seq in (a, b, shared, again):
        manager.free(seq)
    assert manager.num_free_pages == manager.num_pages - 1


def test_session_pages_survive_eviction_that_evicts_plain_pages():
    clock = Clock()
    manager = BlockManager(num_pages=9, page_size=PAGE, session_ttl=TTL, clock=clock)
    conversation, other = list(range(100, 109)), list(range(200, 209))  # 2 full pages each before the last token
    run(manager, conversation, "turn-1", session="chat")  # freed first: plain LRU would evict it first
    clock.now += 1
    run(manager, other, "plain")
    assert len(manager.sessions) == 2 and manager.num_free_pages == 8  # kept pages are free pages too
    clock.now += 1
    run(manager, list(range(300, 323)), "pressure")  # 6 pages: the 2 never hashed, then 4 evicted
    _, hits_plain = run(manager, other, "plain-again")
    clock.now += 1
    _, hits_session = run(manager, conversation, "turn-2", session="chat")
    assert hits_plain == 0 and hits_session == 2 * PAGE
    assert manager.num_session_queried_tokens == 2 * len(conversation)
    assert manager.num_session_hit_tokens == 2 * PAGE
    assert manager.sessions.num_live == 1
    assert manager.num_free_pages == manager.num_pages - 1


def test_session_pages_go_last_but_they_do_go():
    clock = Clock()
    manager = BlockManager(num_pages=9, page_size=PAGE, session_ttl=TTL, clock=clock)
    run(manager, list(range(100, 109)), "turn-1", session="chat")
    seq, _ = run(manager, list(range(300, 332)), "everything", free=False)  # all 8 pages
    assert len(seq.block_table) == 8 and len(manager.sessions) == 0
    manager.free(seq)
    assert manager.num_free_pages == manager.num_pages - 1


def test_an_expired_session_loses_its_preference():
    clock = Clock()
    manager = BlockManager(num_pages=9, page_size=PAGE, session_ttl=TTL, clock=clock)
    conversation, other = list(range(100, 109)), list(range(200, 209))
    run(manager, other, "plain")  # freed first
    clock.now += 1
    run(manager, conversation, "turn-1", session="chat")
    assert manager.sessions.num_live == 1
    clock.now += TTL + 1
    assert manager.sessions.num_live == 0
    # Pressure takes the 4 pages never hashed, then evicts 2: the expired session's, demoted
    # ahead of the plain ones although `other`'s were freed before them.
    run(manager, list(range(300, 323)), "pressure")
    assert len(manager.sessions) == 0
    _, hits_plain = run(manager, other, "plain-again")
    _, hits_session = run(manager, conversation, "turn-2", session="chat")
    assert hits_plain == 2 * PAGE and hits_session == 0
    assert manager.num_free_pages == manager.num_pages - 1


def test_a_plain_request_reusing_a_session_page_leaves_it_to_the_session():
    clock = Clock()
    manager = BlockManager(num_pages=9, page_size=PAGE, session_ttl=TTL, clock=clock)
    conversation = list(range(100, 109))
    run(manager, conversation, "turn-1", session="chat")
    kept = len(manager.sessions)
    assert kept == 2
    _, hits = run(manager, conversation, "reader")  # no session: hits the kept pages, then frees them
    assert hits == 2 * PAGE and len(manager.sessions) == kept
