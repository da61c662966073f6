"""`LLM`'s progress bar over the choices of a call (rich, on a terminal's stderr)."""

from __future__ import annotations


class progress:
    """A rich progress bar over `total` choices (nothing where `shown` is False); the
    context's value advances it by one."""

    def __init__(self, total: int, shown: bool) -> None:
        self.total, self.shown, self._bar = total, shown, None

    def __enter__(self):
        if not self.shown:
            return lambda: None
        from rich.progress import Progress

        self._bar = Progress(transient=True)
        self._bar.start()
        task = self._bar.add_task("generating", total=self.total)
        return lambda: self._bar.advance(task)

    def __exit__(self, *_) -> None:
        if self._bar is not None:
            self._bar.stop()
