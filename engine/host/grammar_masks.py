"""The next-token masks of constrained sequences, computed in a worker thread.

As soon as a step's tokens have been consumed by the matchers (engine/host/output.py), `start`
hands every constrained sequence's matcher to a worker thread, which fills their packed
masks with llguidance's parallel executor (it releases the GIL). Meanwhile the engine
thread finishes the step's outputs, hands them to the server, takes new requests and
schedules the next step; `take` collects each row's mask as the next step is planned,
waiting only for whatever the worker has not finished. A sequence the worker did not see
(one whose first token is sampled at the end of its prefill) gets its mask right there.

The matchers are safe to share this way: the engine thread consumes a token into a
matcher only after the step that sampled it, by which time `take` has waited for the
worker's pass over that matcher.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import llguidance
import llguidance.numpy
import numpy as np

from engine.host.sequence import Sequence
from engine.sampling.masks import num_words
from engine.text.reasoning import is_thinking


class GrammarMasks:
    """Packed allowed-token masks ([ceil(vocab / 32)] int32 words) for constrained rows."""

    def __init__(self, vocab_size: int) -> None:
        self.num_words = num_words(vocab_size)
        self._executor = llguidance.LLExecutor()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flint-grammar")
        self._pending: Future | None = None
        self._rows: dict[str, tuple[int, int]] = {}  # request id -> (row, tokens when started)
        self._words = np.empty((0, self.num_words), np.int32)

    def start(self, seqs: Iterable[Sequence]) -> None:
        """Begin computing the masks of `seqs`' next tokens (the unconstrained are skipped)."""
        # A sequence still thinking has no mask yet: its grammar applies to the answer.
        constrained = [seq for seq in seqs if seq.matcher is not None and not seq.is_finished and not is_thinking(seq)]
        self._wait()
        if not constrained:
            self._rows = {}
            return
        self._rows = {seq.request_id: (row, seq.num_tokens) for row, seq in enumerate(constrained)}
        self._words = np.empty((len(constrained), self.num_words), np.int32)
        matchers = [(seq.matcher, row) for row, seq in enumerate(constrained)]
        self._pending = self._worker.submit(llguidance.numpy.fill_next_token_bitmask_par,
                                            self._executor, matchers, self._words)

    def take(self, seq: Sequence) -> np.ndarray:
        """`seq`'s mask for the token it samples next."""
        self._wait()  # first: a pass that failed forgets its rows
        row, num_tokens = self._rows.get(seq.request_id, (None, None))
        if row is not None and num_tokens == seq.num_tokens:
            return self._words[row]
        words = np.empty((1, self.num_words), np.int32)
        llguidance.numpy.fill_next_token_bitmask(seq.matcher, words)
        return words[0]

    def _wait(self) -> None:
        """Wait for the worker's pass. One that raised can't say whose grammar failed: its
        masks are forgotten, so that `take` computes each one alone, and the sequence whose
        matcher raises there fails by itself (engine/rows.py)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            if pending.exception() is not None:
                self._rows = {}

    def close(self) -> None:
        self._wait()
        self._worker.shutdown(wait=True)
