"""engine/host/block_manager.py: pages, reference counts, the chained-hash prefix cache, eviction."""

from __future__ import annotations

import random

import pytest
from kv_identity import prefix_ids

from engine.host.block_manager import BlockManager, hash_page
from engine.host.request import SamplingParams, StopCriteria
from engine.host.sequence import Sequence


def make_seq(token_ids: list[int], request_id: str = "r") -> Sequence:
    return Sequence(request_id, token_ids, SamplingParams(), seed=0, stop=StopCriteria())


def compute(manager: BlockManager, seq: Sequence, num_new_tokens: int) -> None:
    """What one step does to a sequence's pages: cover the chunk, compute it, register it."""
    manager.append(seq, num_new_tokens)
    seq.num_computed_tokens += num_new_tokens
    manager.mark_computed(seq)


def admit_and_compute(manager: BlockManager, token_ids: list[int], request_id: str = "r") -> Sequence:
    seq = make_seq(token_ids, request_id)
    manager.allocate(seq)
    compute(manager, seq, seq.num_uncomputed_tokens)
    return seq


def test_pages_are_handed_out_once_and_never_the_null_page():
    manager = BlockManager(num_pages=9, page_size=4)
    seqs = [make_seq(list(range(100 + 10 * i, 108 + 10 * i)), f"r{i}") for i in range(4)]
    for seq in seqs:
        assert manager.allocate(seq) == 0
        manager.append(seq, 8)
    pages = [page for seq in seqs for page in seq.block_table]
    assert sorted(pages) == list(range(1, 9))
    assert manager.num_free_pages == 0 and manager.usage == 1.0
    assert not manager.can_append(seqs[0], 9) and manager.can_append(seqs[0], 8)
    with pytest.raises(RuntimeError):
        manager.append(seqs[0], 9)
    assert all(manager.ref_count(page) == 1 for page in pages)
    manager.free(seqs[1])
    assert seqs[1].block_table == [] and seqs[1].num_computed_tokens == 0
    assert manager.num_free_pages == 2 and manager.usage == 0.75
    for seq in (seqs[0], seqs[2], seqs[3]):
        manager.free(seq)
    assert manager.num_free_pages == 8 and manager.usage == 0.0
    assert manager.ref_count(0) == 0


def test_append_covers_exactly_the_pages_needed():
    manager = BlockManager(num_pages=10, page_size=4)
    seq = make_seq(list(range(10)))
    manager.allocate(seq)
    manager.append(seq, 5)  # tokens 0..4: two pages
    assert len(seq.block_table) == 2
    seq.num_computed_tokens = 5
    manager.append(seq, 3)  # up to 8 tokens: still two pages
    assert len(seq.block_table) == 2
    manager.append(seq, 4)  # up to 9 tokens: a third
    assert len(seq.block_table) == 3
    assert manager.num_appendable_tokens(seq) == (3 + 6) * 4 - 5


def test_repeated_prefix_hits_all_pages_but_the_one_holding_the_last_token():
    prefix = [random.Random(0).randrange(32000) for _ in range(256)]
    manager = BlockManager(num_pages=64, page_size=16)
    first = admit_and_compute(manager, prefix, "first")
    assert manager.num_cached_pages == 16

    same = make_seq(prefix, "same")
    # The last token must be computed to get logits, so its page (the 16th) is not taken.
    assert manager.allocate(same) == 240
    assert same.block_table == first.block_table[:15] and same.num_computed_tokens == 240
    assert all(manager.ref_count(page) == 2 for page in same.block_table)

    longer = make_seq(prefix + [1, 2, 3], "longer")
    assert manager.allocate(longer) == 256
    assert longer.block_table == first.block_table
    assert manager.ref_count(first.block_table[0]) == 3 and manager.ref_count(first.block_table[15]) == 2

    compute(manager, same, 16)  # its own copy of the last page: the cached one stays shared
    assert same.block_table[15] != first.block_table[15]
    assert manager.ref_count(same.block_table[15]) == 1
    for seq in (first, same, longer):
        manager.free(seq)
    assert manager.num_free_pages == 63 and manager.num_cached_pages == 16


def test_hashes_are_chained_so_a_page_hits_only_after_the_same_prefix():
    manager = BlockManager(num_pages=32, page_size=4)
    admit_and_compute(manager, [1, 2, 3, 4, 5, 6, 7, 8, 9], "a")
    # The same second page after a different first page: no hit at all.
    assert manager.allocate(make_seq([0, 2, 3, 4, 5, 6, 7, 8, 9], "b")) == 0
    # The same first page, a different second page: only the first hits.
    assert manager.allocate(make_seq([1, 2, 3, 4, 5, 6, 7, 0, 9], "c")) == 4
    assert manager.allocate(make_seq([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "d")) == 8
    assert hash_page(b"", [5, 6, 7, 8]) != hash_page(hash_page(b"", [1, 2, 3, 4]), [5, 6, 7, 8])


def test_output_tokens_are_cached_for_the_next_turn():
    manager = BlockManager(num_pages=32, page_size=4)
    seq = admit_and_compute(manager, [1, 2, 3, 4, 5, 6])
    for token in (7, 8, 9):  # decode: sample, then compute the sampled token next step
        seq.append_token(token)
        compute(manager, seq, 1)
    manager.free(seq)
    next_turn = make_seq([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], "turn2")
    assert manager.allocate(next_turn) == 8


def test_freed_cached_pages_are_evicted_least_recently_freed_first():
    manager = BlockManager(num_pages=9, page_size=4)  # 8 usable pages
    a = admit_and_compute(manager, [1] * 8 + [0], "a")  # 3 pages, 2 of them full and cached
    b = admit_and_compute(manager, [2] * 8 + [0], "b")
    manager.free(a)
    manager.free(b)
    assert manager.num_free_pages == 8 and manager.num_cached_pages == 4

    # Never-hashed pages go first: 4 of them, and every cached page survives.
    filler = make_seq(list(range(100, 116)), "filler")
    manager.allocate(filler)
    manager.append(filler, 16)
    assert manager.num_cached_pages == 4
    # One more page evicts a cached one: a's tail, since a was freed before b and tails go first.
    manager.append(filler, 17)
    assert manager.num_cached_pages == 3
    assert manager.allocate(make_seq([1] * 8 + [0], "a2")) == 4  # a's first page still hits
    assert manager.allocate(make_seq([2] * 8 + [0], "b2")) == 8  # b untouched


def test_a_hit_takes_the_page_out_of_the_eviction_order():
    manager = BlockManager(num_pages=5, page_size=4)  # 4 usable pages
    a = admit_and_compute(manager, [1] * 8 + [0], "a")
    manager.free(a)
    again = make_seq([1] * 8 + [0], "again")
    assert manager.allocate(again) == 8
    assert manager.num_free_pages == 2  # the two hit pages are in use, not evictable
    other = make_seq(list(range(50, 58)), "other")
    manager.allocate(other)
    manager.append(other, 8)
    assert manager.num_free_pages == 0
    assert not manager.can_append(other, 9)
    assert all(manager.ref_count(page) == 1 for page in again.block_table)


def test_identical_prompts_computed_together_keep_one_cached_copy():
    manager = BlockManager(num_pages=16, page_size=4)
    x, y = make_seq(list(range(9)), "x"), make_seq(list(range(9)), "y")
    for seq in (x, y):
        manager.allocate(seq)
    for seq in (x, y):
        compute(manager, seq, 9)
    assert manager.num_cached_pages == 2
    assert set(x.block_table).isdisjoint(y.block_table)
    manager.free(x)
    manager.free(y)
    assert manager.num_free_pages == 15
    assert manager.allocate(make_seq(list(range(9)), "z")) == 8


def test_without_prefix_caching_nothing_is_shared():
    manager = BlockManager(num_pages=16, page_size=4, enable_prefix_caching=False)
    admit_and_compute(manager, list(range(9)), "x")
    seq = make_seq(list(range(9)), "y")
    assert manager.allocate(seq) == 0 and seq.block_table == []
    assert manager.num_cached_pages == 0


@pytest.mark.parametrize("seed", range(20))
def test_random_operations_never_write_a_shared_page(seed):
    """Random admissions, chunks, decodes and frees over a fake KV store of prefix identities."""
    rng = random.Random(seed)
    page_size = 4
    manager = BlockManager(num_pages=24, page_size=page_size)
    prefixes = [[rng.randrange(5) for _ in range(rng.randrange(1, 14))] for _ in range(3)]
    kv: dict[int, int] = {}  # slot -> prefix identity of the token written there
    live: list[Sequence] = []
    for step in range(300):
        if rng.random() < 0.3 or not live:
            tokens = rng.choice(prefixes) + [rng.randrange(5) for _ in range(rng.randrange(1, 6))]
            seq = make_seq(tokens, f"s{step}")
            manager.allocate(seq)
            live.append(seq)
        seq = rng.choice(live)
        if rng.random() < 0.15:
            manager.free(seq)
            live.remove(seq)
            continue
        if seq.num_uncomputed_tokens == 0:
            seq.append_token(rng.randrange(5))
        num_new = rng.randrange(1, seq.num_uncomputed_tokens + 1)
        if not manager.can_append(seq, num_new):
            manager.free(seq)
            live.remove(seq)
            continue
        manager.append(seq, num_new)
        ids = prefix_ids(seq.token_ids)
        for position in range(seq.num_computed_tokens, seq.num_computed_tokens + num_new):
            page = seq.block_table[position // page_size]
            assert manager.ref_count(page) == 1, "a write into a shared page"
            kv[page * page_size + position % page_size] = ids[position]
        seq.num_computed_tokens += num_new
        manager.mark_computed(seq)
        for other in live:  # every computed token of every sequence still reads back right
            other_ids = prefix_ids(other.token_ids)
            for position in range(other.num_computed_tokens):
                slot = other.block_table[position // page_size] * page_size + position % page_size
                assert kv[slot] == other_ids[position]
        assert 0 not in {page for other in live for page in other.block_table}
    for seq in live:
        manager.free(seq)
    assert manager.num_free_pages == 23
    assert all(manager.ref_count(page) == 0 for page in range(24))


def test_a_fork_shares_every_page_and_copies_only_the_shared_page_it_writes():
    manager = BlockManager(num_pages=12, page_size=4)
    parent = admit_and_compute(manager, list(range(10)))  # pages: full, full, 2 of 4 tokens
    children = [make_seq(list(range(10)), f"c{i}") for i in range(2)]
    for child in children:
        manager.fork(parent, child)
        assert child.block_table == parent.block_table and child.num_computed_tokens == 10
    assert [manager.ref_count(page) for page in parent.block_table] == [3, 3, 3]
    free = manager.num_free_pages
    source, destination = manager.copy_on_write(children[0])
    assert source == parent.block_table[2] and destination not in parent.block_table
    assert children[0].block_table == parent.block_table[:2] + [destination]
    assert manager.ref_count(source) == 2 and manager.num_free_pages == free - 1
    assert manager.copy_on_write(children[1]) == (source, children[1].block_table[2])
    assert manager.copy_on_write(parent) is None  # the last holder writes its own page
    for seq in (parent, *children):
        manager.free(seq)
    assert manager.usage == 0


def test_a_fork_at_a_page_edge_copies_nothing():
    manager = BlockManager(num_pages=8, page_size=4)
    parent = admit_and_compute(manager, list(range(8)))  # two full pages: the next token opens a third
    child = make_seq(list(range(8)), "c")
    manager.fork(parent, child)
    assert manager.copy_on_write(child) is None and manager.copy_on_write(parent) is None
    manager.append(child, 1)
    manager.append(parent, 1)
    assert child.block_table[2] != parent.block_table[2]


def test_a_windowed_model_returns_the_pages_behind_its_window():
    """Every layer sees the last 6 keys: after 30 tokens, the next one (position 30) sees
    keys 25..30, so pages 0..5 (keys 0..23) are never read again and go back to the pool,
    still in the prefix cache; the block table holds the null page in their place."""
    manager = BlockManager(num_pages=12, page_size=4, window=6)
    seq = make_seq(list(range(30)))
    manager.allocate(seq)
    compute(manager, seq, 30)
    held = list(seq.block_table)
    manager.release_unseen(seq)
    assert seq.block_table == [0] * 6 + held[6:]
    assert manager.num_free_pages == 11 - 2 and [manager.ref_count(page) for page in held[:6]] == [0] * 6
    assert manager.allocate(again := make_seq(list(range(30)), "again")) == 28  # the prefix cache kept them
    manager.free(again)
    child = make_seq(list(range(30)), "child")
    manager.fork(seq, child)  # shares only the pages still held
    assert [manager.ref_count(page) for page in held[6:]] == [2, 2]
    manager.free(child)
    manager.free(seq)
    assert manager.num_free_pages == 11 and all(manager.ref_count(page) == 0 for page in range(12))


def test_without_a_window_no_page_is_released():
    manager = BlockManager(num_pages=12, page_size=4)
    seq = make_seq(list(range(30)))
    manager.allocate(seq)
    compute(manager, seq, 30)
    held = list(seq.block_table)
    manager.release_unseen(seq)
    assert seq.block_table == held
