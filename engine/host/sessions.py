"""Session affinity on one server: the freed cached pages of live sessions, evicted last (host only).

A multi-turn client (a chat, an agent's rollout) sends each turn with the whole conversation
so far, and names its session (`prompt_cache_key`, or the `x-session-affinity` and
`x-multi-turn-session-id` headers; api/core/tenancy.py). Between two turns the pages of the
conversation sit free in the prefix cache, where any other traffic may evict them. The block
manager (engine/host/block_manager.py) therefore pools the freed cached pages of a live
session here, apart from the plain evictable ones, and takes them only when no other free
page is left.

A session is live for `ttl` seconds after its last request arrived or ended. Its pages lose
their preference when it expires: the block manager demotes them lazily, at its next
allocation or eviction (`expire`), so an idle server needs no timer.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class Sessions:
    """The live sessions, and the free cached pages they keep, least recently freed first."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl  # seconds a session stays live after its last request
        self.clock = clock
        self._last_seen: OrderedDict[str, float] = OrderedDict()  # live sessions, least recently seen first
        self._pages: OrderedDict[int, str] = OrderedDict()  # kept page -> its session; LRU first
        self._pages_of: dict[str, set[int]] = {}  # session -> its kept pages

    def __len__(self) -> int:
        """Pages kept for live sessions (free: an allocation takes them last)."""
        return len(self._pages)

    @property
    def num_live(self) -> int:
        """Sessions seen within the last `ttl` seconds. Safe from another thread: it reads a
        copy of the times, made in one call."""
        cutoff = self.clock() - self.ttl
        return sum(seen > cutoff for seen in list(self._last_seen.values()))

    def touch(self, session: str) -> None:
        """A request of `session` arrived or ended now: it stays live `ttl` seconds more."""
        self._last_seen[session] = self.clock()
        self._last_seen.move_to_end(session)

    def is_live(self, session: str) -> bool:
        seen = self._last_seen.get(session)
        return seen is not None and self.clock() - seen < self.ttl

    def keep(self, page: int, session: str) -> None:
        """Pool a freed cached page of live `session`, as its most recently freed."""
        self._pages[page] = session
        self._pages_of.setdefault(session, set()).add(page)

    def take(self, page: int) -> bool:
        """Take `page` out of the pool (a prefix-cache hit reuses it); False if it is not kept."""
        session = self._pages.pop(page, None)
        if session is None:
            return False
        self._forget_page(page, session)
        return True

    def evict(self) -> int:
        """Take the least recently freed kept page (the pool must not be empty)."""
        page, session = self._pages.popitem(last=False)
        self._forget_page(page, session)
        return page

    def expire(self) -> list[int]:
        """Forget every session not seen within `ttl` seconds; the pages they kept, least
        recently freed first, are no longer kept (the caller pools them as plain pages)."""
        cutoff = self.clock() - self.ttl
        expired: set[int] = set()
        while self._last_seen and next(iter(self._last_seen.values())) <= cutoff:
            session, _ = self._last_seen.popitem(last=False)
            expired |= self._pages_of.pop(session, set())
        if not expired:
            return []
        demoted = [page for page in self._pages if page in expired]  # in the pool's order
        for page in demoted:
            del self._pages[page]
        return demoted

    def _forget_page(self, page: int, session: str) -> None:
        pages = self._pages_of[session]
        pages.discard(page)
        if not pages:
            del self._pages_of[session]
