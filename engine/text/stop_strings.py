"""Stop strings over streamed text: what is safe to emit, and where generation must end.

Text arrives in pieces (engine/host/output.py feeds each generated token's detokenized delta)
and a stop string may span pieces. The matcher emits text as soon as it cannot be the
start of a stop string, holds back only a suffix that could still begin one, and on a
match emits the text before it and nothing after: the stop string itself is excluded, as
every dialect specifies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StopScan:
    """The result of feeding one piece: text safe to emit now, and the stop string hit."""

    text: str
    stop: str | None = None

    @property
    def stopped(self) -> bool:
        return self.stop is not None


class StopStringMatcher:
    """Feed text pieces in order; `flush()` once the generation ends without a match."""

    def __init__(self, stops: Sequence[str]) -> None:
        if any(not stop for stop in stops):
            raise ValueError("stop strings must not be empty")
        self.stops = tuple(stops)
        self._held = ""  # a suffix of the text so far that may begin a stop string
        self._done = False

    def feed(self, piece: str) -> StopScan:
        """The text of `piece` (with what was held back) that can be emitted now."""
        if self._done:
            return StopScan("")
        text = self._held + piece
        match = self._earliest_match(text)
        if match is not None:
            position, stop = match
            self._held, self._done = "", True
            return StopScan(text[:position], stop)
        return self._hold_back(text)

    def feed_pieces(self, pieces: list[str]) -> tuple[StopScan, int | None]:
        """`feed` of the pieces at once, as fed one by one: the scan, and the index of the
        piece at which a stop string was first complete (None: none was). Fed one by one,
        the scan stops at the first piece that completes any stop string, and reports the
        match then found that starts first; a shorter stop starting later may end sooner
        than the match that starts first in the whole text, so that piece is found first."""
        if self._done:
            return StopScan(""), None
        text = self._held + "".join(pieces)
        ends = [first + len(stop) for stop in self.stops if (first := text.find(stop)) >= 0]
        if not ends:
            return self._hold_back(text), None
        end, index = len(self._held), -1
        for index, piece in enumerate(pieces):
            end += len(piece)
            if end >= min(ends):
                break
        position, stop = self._earliest_match(text[:end])
        self._held, self._done = "", True
        return StopScan(text[:position], stop), index

    def flush(self) -> str:
        """Held-back text, emitted because the generation ended before it could match."""
        held, self._held = self._held, ""
        return "" if self._done else held

    def _hold_back(self, text: str) -> StopScan:
        """`text` (holding no stop string) less the suffix that may begin one, kept for later."""
        keep = self._partial_suffix_length(text)
        self._held = text[len(text) - keep:] if keep else ""
        return StopScan(text[: len(text) - keep])

    def _earliest_match(self, text: str) -> tuple[int, str] | None:
        found = [(text.find(stop), stop) for stop in self.stops]
        hits = [(position, stop) for position, stop in found if position >= 0]
        return min(hits, key=lambda hit: hit[0]) if hits else None

    def _partial_suffix_length(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string.

        A candidate suffix starts with a stop's first character, which str.find looks for
        in the text's last len(stop) - 1 characters: usually there is none, and a feed
        costs one search per stop, not a comparison per length (tools/profile_host.py)."""
        longest = 0
        for stop in self.stops:
            position = text.find(stop[0], max(len(text) - len(stop) + 1, 0))
            while position != -1 and len(text) - position > longest:
                if stop.startswith(text[position:]):
                    longest = len(text) - position
                    break
                position = text.find(stop[0], position + 1)
        return longest
