"""Pages of the paged KV cache: the free pool, reference counts and the prefix cache (host only).

A sequence's KV lives in the pages of its `block_table`. A page that is full and computed
is registered in the prefix cache under a chained hash: the hash of (the previous page's
hash, this page's token ids), so a page is found only after the very same prefix. A
sequence whose input embeddings were replaced roots its chain in a digest of them rather
than the empty hash (`seq.cache_salt`, engine/host/embeddings.py): its KV is not its tokens'. Later
sequences that start with the same tokens take the cached pages instead of recomputing
them, and several sequences may then reference one page.

Why sharing is safe: only full, computed pages are ever registered, and a sequence takes
cached pages only for its leading tokens, below its `num_computed_tokens`. The runner
writes only at positions >= num_computed_tokens, which fall in pages the sequence took
from the free pool itself (reference count 1, no hash). So a shared page is never written.

Freed pages keep their hash while they sit in the free pool, so they can still be hit.
Allocation takes never-hashed free pages first, then evicts the least recently freed
cached page, and the pages of live sessions last: a freed cached page last held by a
sequence of a session that is still live (engine/host/sessions.py) waits in a pool of its
own, so that the next turn of a conversation finds its prefix even under eviction pressure.
Page 0 is the null page and is never handed out.

A sequence isolated from others (engine/host/tenancy.py) roots its chain in a salt of its
isolation, so its pages are found only by sequences of the same isolation.

A model whose every layer attends to a window of the latest `window` keys (Mistral's
sliding window) never reads a page again once the window has passed it: `release_unseen`
returns such pages to the pool (the prefix cache keeps their hash) and puts the null page
in their place in the block table, so a long sequence holds about window / page_size
pages rather than all of its own.
"""

from __future__ import annotations

import hashlib
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable

from engine.host.sequence import Sequence
from engine.host.sessions import Sessions

NO_PARENT = b""  # the parent hash of a sequence's first page
NULL_PAGE = 0  # never handed out; stands in a block table for a page released behind a window


def hash_page(parent_hash: bytes, token_ids: list[int]) -> bytes:
    """The chained hash of one full page: it depends on every token before the page too.

    A cryptographic digest, so that crafted prompts cannot collide with another user's
    prefix and read its KV.
    """
    digest = hashlib.blake2b(parent_hash, digest_size=16)
    digest.update(array("q", token_ids).tobytes())
    return digest.digest()


class BlockManager:
    """Hands out KV-cache pages to sequences and shares full pages through the prefix cache.

    Usage per sequence: `allocate` on admission (prefix-cache hits), `can_append`/`append`
    before each step to cover the tokens scheduled, `mark_computed` after each step (once
    `num_computed_tokens` has advanced), `free` on finish, abort or preemption. Beams:
    `fork` shares a sequence's pages with a new one, and `copy_on_write` unshares the page
    a sequence is about to write.
    """

    def __init__(self, num_pages: int, page_size: int, enable_prefix_caching: bool = True, window: int = 0,
                 session_ttl: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        if num_pages < 2:
            raise ValueError("the KV cache needs the null page and at least one more")
        self.num_pages = num_pages  # page 0 included
        self.page_size = page_size
        self.enable_prefix_caching = enable_prefix_caching
        self.window = window  # keys every layer sees behind a token (0: all of them)
        self._ref_counts = [0] * num_pages
        self._unhashed_pages: deque[int] = deque(range(1, num_pages))  # free, never hashed
        self._evictable_pages: OrderedDict[int, None] = OrderedDict()  # free, hashed; LRU first
        self._cached_pages: dict[bytes, int] = {}  # block hash -> page
        self._page_hashes: dict[int, bytes] = {}  # page -> block hash
        self.num_queried_tokens = 0  # tokens of admitted sequences looked up in the prefix cache
        self.num_hit_tokens = 0  # of those, tokens found
        # Session affinity (engine/host/sessions.py): free cached pages of live sessions, evicted
        # last; the session that last held each cached page; the lookups of session sequences.
        self.sessions = Sessions(session_ttl, clock)
        self._page_sessions: dict[int, str] = {}
        self.num_session_queried_tokens = 0
        self.num_session_hit_tokens = 0
        self.epoch = 0  # prefix-cache resets so far (new weights, a wake from sleep): part of every root

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix: its KV was computed by weights no longer served, or is
        gone with the cache's memory. The free cached pages become plain free pages; those a
        running sequence holds stay its own, and no later sequence finds them, for every
        chain now roots in the new epoch."""
        self.epoch += 1
        self._expire_sessions()
        while len(self.sessions):
            self._evictable_pages[self.sessions.evict()] = None
        for page in self._evictable_pages:
            del self._cached_pages[self._page_hashes.pop(page)]
            self._page_sessions.pop(page, None)
            self._unhashed_pages.append(page)
        self._evictable_pages.clear()

    def _root(self, seq: Sequence) -> bytes:
        """Where `seq`'s chain of page hashes starts: its own salt (NO_PARENT, unless replaced
        embeddings, an isolation or an adapter made its KV differ), in this epoch."""
        if not self.epoch:
            return seq.cache_salt
        return hashlib.blake2b(self.epoch.to_bytes(8, "little") + seq.cache_salt, digest_size=16).digest()

    @property
    def num_free_pages(self) -> int:
        """Pages an allocation can take now: never-hashed free pages plus evictable cached ones
        (those kept for live sessions included)."""
        return len(self._unhashed_pages) + len(self._evictable_pages) + len(self.sessions)

    @property
    def num_cached_pages(self) -> int:
        """Pages registered in the prefix cache, in use or evictable."""
        return len(self._cached_pages)

    @property
    def usage(self) -> float:
        """Fraction of the allocatable pages (all but the null page) held by sequences."""
        return 1.0 - self.num_free_pages / (self.num_pages - 1)

    def ref_count(self, page: int) -> int:
        """How many sequences reference `page` (0 for a free page)."""
        return self._ref_counts[page]

    def allocate(self, seq: Sequence) -> int:
        """Admit `seq`: take its leading pages from the prefix cache, return the tokens they hold.

        Only pages entirely inside token_ids[:-1] are looked up, so at least the last token
        is left to compute and the step produces logits to sample from. Sets
        `seq.block_table`, `seq.block_hashes` and `seq.num_computed_tokens` (a multiple of
        page_size). The sequence must hold no pages.
        """
        assert not seq.block_table, f"{seq.request_id} already holds pages"
        seq.num_computed_tokens = 0
        self._touch(seq)
        # Prompt logprobs need the logits of every prompt token, so nothing may be skipped.
        if not self.enable_prefix_caching or seq.sampling.prompt_logprobs is not None:
            return 0
        parent_hash = self._root(seq)
        for index in range((seq.num_tokens - 1) // self.page_size):
            block_hash = hash_page(parent_hash, self._page_token_ids(seq, index))
            page = self._cached_pages.get(block_hash)
            if page is None:
                break
            self._take(page)
            self._mark_session(page, seq)
            seq.block_table.append(page)
            seq.block_hashes.append(block_hash)
            parent_hash = block_hash
        seq.num_computed_tokens = len(seq.block_table) * self.page_size
        self.num_queried_tokens += seq.num_tokens
        self.num_hit_tokens += seq.num_computed_tokens
        if seq.session is not None:
            self.num_session_queried_tokens += seq.num_tokens
            self.num_session_hit_tokens += seq.num_computed_tokens
        return seq.num_computed_tokens

    def num_appendable_tokens(self, seq: Sequence) -> int:
        """The most new tokens `seq` could compute with its pages plus every free page."""
        capacity = (len(seq.block_table) + self.num_free_pages) * self.page_size
        return capacity - seq.num_computed_tokens

    def num_missing_pages(self, seqs: list[Sequence], num_new_tokens: int) -> int:
        """Free pages that `num_new_tokens` more tokens of each of `seqs` would take."""
        return sum(self.num_missing_pages_of(seq, num_new_tokens) for seq in seqs)

    def can_append(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Whether the free pool can cover `num_new_tokens` more tokens of `seq`."""
        return self.num_missing_pages_of(seq, num_new_tokens) <= self.num_free_pages

    def append(self, seq: Sequence, num_new_tokens: int) -> None:
        """Give `seq` pages for tokens up to num_computed_tokens + num_new_tokens.

        Check `can_append` first; raises RuntimeError if the pool runs dry.
        """
        self.take_pages(seq, self.num_missing_pages_of(seq, num_new_tokens))

    def take_pages(self, seq: Sequence, count: int) -> None:
        """Append `count` free pages to `seq`'s table; RuntimeError if the pool runs dry."""
        if count > self.num_free_pages:
            raise RuntimeError(f"out of KV-cache pages for {seq.request_id}")
        for _ in range(count):
            seq.block_table.append(self._take_free_page())
            self._mark_session(seq.block_table[-1], seq)

    def mark_computed(self, seq: Sequence) -> None:
        """Register in the prefix cache every page of `seq` that is now full and computed.

        Call after advancing `seq.num_computed_tokens`. Output tokens are registered too, so
        a follow-up request (the next turn of a chat) reuses them.
        """
        if not self.enable_prefix_caching:
            return
        num_full_pages = seq.num_computed_tokens // self.page_size
        for index in range(len(seq.block_hashes), num_full_pages):
            parent_hash = seq.block_hashes[-1] if seq.block_hashes else self._root(seq)
            block_hash = hash_page(parent_hash, self._page_token_ids(seq, index))
            seq.block_hashes.append(block_hash)
            self._register(seq.block_table[index], block_hash)

    def free(self, seq: Sequence) -> None:
        """Release the pages of `seq`; it then holds none and has no computed tokens.

        Pages no longer referenced return to the free pool, keeping their hash. The last
        page goes back first, so it is evicted first: a chain is found from its start, and
        its tail is the part least likely to be shared.
        """
        self._touch(seq)  # a session stays live for its TTL after its last request ends
        for page in reversed(seq.block_table):
            self._release(page)
        seq.block_table = []
        seq.block_hashes = []
        seq.num_computed_tokens = 0

    def release_unseen(self, seq: Sequence) -> None:
        """Return the pages no layer of a windowed model will read again for `seq`: those
        wholly before the first key its next token sees (position num_computed_tokens -
        window + 1). They are full and computed, so already registered in the prefix cache.
        Call after `mark_computed`."""
        if not self.window:
            return
        first_seen = seq.num_computed_tokens - self.window + 1
        for index in range(min(max(first_seen, 0) // self.page_size, len(seq.block_table))):
            self._release(seq.block_table[index])
            seq.block_table[index] = NULL_PAGE

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Give `child` (holding no pages) every page of `parent`, shared: a beam forking.
        The child computes from where the parent stands; `copy_on_write` gives it a page of
        its own before it writes into a shared one."""
        assert not child.block_table, f"{child.request_id} already holds pages"
        for page in parent.block_table:
            if page != NULL_PAGE:  # a page released behind a window
                self._ref_counts[page] += 1
        child.block_table = list(parent.block_table)
        child.block_hashes = list(parent.block_hashes)
        child.num_computed_tokens = parent.num_computed_tokens

    def copy_on_write(self, seq: Sequence) -> tuple[int, int] | None:
        """Make the page `seq` writes its next token into its own: when another sequence
        shares it (a forked beam's partly filled last page), `seq` takes a free page in its
        place and gets (shared page, new page) back, to be copied on the device before the
        write; None when nothing needs copying. Full pages are never written, so only the
        page holding position num_computed_tokens can need it. RuntimeError when no page is free."""
        index = seq.num_computed_tokens // self.page_size
        if index >= len(seq.block_table) or self._ref_counts[seq.block_table[index]] == 1:
            return None
        if not self.num_free_pages:
            raise RuntimeError(f"out of KV-cache pages for {seq.request_id}")
        shared = seq.block_table[index]
        self._ref_counts[shared] -= 1  # still held by another sequence: never freed here
        seq.block_table[index] = self._take_free_page()
        return shared, seq.block_table[index]

    def _page_token_ids(self, seq: Sequence, index: int) -> list[int]:
        return seq.token_ids[index * self.page_size : (index + 1) * self.page_size]

    def num_missing_pages_of(self, seq: Sequence, num_new_tokens: int) -> int:
        """Free pages that `num_new_tokens` more tokens of `seq` would take."""
        num_tokens = seq.num_computed_tokens + num_new_tokens
        num_pages = -(-num_tokens // self.page_size)
        return max(0, num_pages - len(seq.block_table))

    def _release(self, page: int) -> None:
        """Drop one reference to `page` (the null page: none), pooling it at the last."""
        if page == NULL_PAGE:
            return
        self._ref_counts[page] -= 1
        if self._ref_counts[page] > 0:
            return
        session = self._page_sessions.get(page)
        if page not in self._page_hashes:
            self._page_sessions.pop(page, None)
            self._unhashed_pages.append(page)
        elif session is not None and self.sessions.is_live(session):
            self.sessions.keep(page, session)
        else:
            self._evictable_pages[page] = None

    def _take(self, page: int) -> None:
        """Reference a cached page, taking it out of its free pool if it sits in one."""
        if self._ref_counts[page] == 0 and not self.sessions.take(page):
            del self._evictable_pages[page]
        self._ref_counts[page] += 1

    def _take_free_page(self) -> int:
        """A free page: never hashed, else the least recently freed plain cached page, else
        the least recently freed page of a live session (its hash and session dropped)."""
        if self._unhashed_pages:
            page = self._unhashed_pages.popleft()
        else:
            self._expire_sessions()
            if self._evictable_pages:
                page, _ = self._evictable_pages.popitem(last=False)
            else:
                page = self.sessions.evict()
            del self._cached_pages[self._page_hashes.pop(page)]
            self._page_sessions.pop(page, None)
        self._ref_counts[page] = 1
        return page

    def _touch(self, seq: Sequence) -> None:
        """A request of `seq`'s session arrived or ended: its session stays live (and sessions
        that expired meanwhile lose their pages' preference)."""
        if seq.session is not None:
            self._expire_sessions()
            self.sessions.touch(seq.session)

    def _expire_sessions(self) -> None:
        """Pool the pages of expired sessions as plain ones, first in line to be evicted: they
        were freed at least a TTL ago, before any plain page freed since."""
        for page in reversed(self.sessions.expire()):
            self._evictable_pages[page] = None
            self._evictable_pages.move_to_end(page, last=False)

    def _mark_session(self, page: int, seq: Sequence) -> None:
        """Remember `seq`'s session as the last to hold `page` (a page held outside any session
        keeps the session it had)."""
        if seq.session is not None and self.enable_prefix_caching:
            self._page_sessions[page] = seq.session

    def _register(self, page: int, block_hash: bytes) -> None:
        # Another page may already hold the same content (two identical prompts computed
        # in the same step); the first one stays the cached copy, this one stays private.
        if block_hash in self._cached_pages:
            return
        assert page not in self._page_hashes, f"page {page} is already cached"
        self._cached_pages[block_hash] = page
        self._page_hashes[page] = block_hash
