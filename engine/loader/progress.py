"""How far start-up has come, as counts: the weights read and the buckets compiled.

`Engine.from_model(progress=...)` tells a `Progress` callback `(stage, done, total)`: first
`(stage, 0, total)` as a stage begins, then each step done. The engine says nothing of how
it is shown; `flint serve` draws a progress line per stage on a terminal
(api/server/progress.py). The `report` log messages are told as before, beside these."""

from __future__ import annotations

from collections.abc import Callable

# The tensors read from the checkpoint, or from the served weights an earlier start kept.
# Making the served form and placing it on the devices follow, uncounted: reading (and, for
# GGUF, dequantizing) is most of the time.
WEIGHTS = "weights"
# The token buckets compiled before the engine serves (engine/device/runner.py warmup).
BUCKETS = "buckets"

Progress = Callable[[str, int, int], None]  # (stage, done, total)


class StageCount:
    """One stage's count, told to `progress` (nothing where it is None): `(stage, 0, total)`
    when made, then one more done at each `advance`."""

    def __init__(self, progress: Progress | None, stage: str, total: int):
        self.progress, self.stage, self.total = progress, stage, total
        self.done = 0
        self._tell()

    def advance(self) -> None:
        self.done += 1
        self._tell()

    def finish(self) -> None:
        """The stage is over: what it skipped (a checkpoint's tensors the model does not read)
        counts as done."""
        if self.done < self.total:
            self.done = self.total
            self._tell()

    def _tell(self) -> None:
        if self.progress is not None:
            self.progress(self.stage, self.done, self.total)
