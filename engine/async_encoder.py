"""An encoder shared by every request of a server: the inputs of all the requests that arrive
while a batch runs are run together as the next batch, on one thread of its own.

Each caller awaits its own inputs' results; a batch's error goes to every caller in it (its
inputs were checked against the model's limits before they queued, so an error here is the
encoder's, not one request's). `stop` ends the thread; callers still waiting get an error.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import numpy as np

from engine.device.encoder_runner import ROW_BUCKETS, EncoderInput, EncoderRunner, check_lengths
from engine.loader.encoder_checkpoint import EncoderCheckpoint

# Inputs one batch takes at most: more wait for the next (the runner cuts a batch into its
# row buckets' chunks either way; this bounds what one request's answer waits behind).
MAX_BATCH_INPUTS = 256


@dataclass
class Pending:
    inputs: list[EncoderInput]
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


@dataclass
class AsyncEncoder:
    """A served encoder: its checkpoint, its compiled runner, and the thread batching requests."""

    checkpoint: EncoderCheckpoint
    runner: EncoderRunner
    max_batch_inputs: int = MAX_BATCH_INPUTS
    num_batches: int = 0  # batches run, for /metrics and the batching test
    _queue: list[Pending] = field(default_factory=list)
    _ready: threading.Condition = field(default_factory=threading.Condition)
    _stopped: bool = False
    _thread: threading.Thread | None = None

    @classmethod
    def started(cls, checkpoint: EncoderCheckpoint, row_buckets: tuple[int, ...] = ROW_BUCKETS) -> AsyncEncoder:
        """The encoder's runner compiled (every bucket of `row_buckets` texts) and its thread running."""
        runner = EncoderRunner(checkpoint, row_buckets)
        runner.warmup()
        encoder = cls(checkpoint, runner)
        encoder._thread = threading.Thread(target=encoder._serve, name=f"flint-encoder-{checkpoint.id}", daemon=True)
        encoder._thread.start()
        return encoder

    @property
    def id(self) -> str:
        return self.checkpoint.id

    async def run(self, inputs: list[EncoderInput]) -> np.ndarray:
        """Each input's vector or score, run with whatever else is queued; InputTooLong first
        for one past the model's limit (its index is in `inputs`)."""
        check_lengths(inputs, self.checkpoint.max_tokens)  # here, so the index is the caller's
        loop = asyncio.get_running_loop()
        pending = Pending(inputs, loop.create_future(), loop)
        with self._ready:
            if self._stopped:
                raise RuntimeError(f"the encoder {self.id} has stopped")
            self._queue.append(pending)
            self._ready.notify()
        return await pending.future

    def stop(self) -> None:
        with self._ready:
            self._stopped = True
            self._ready.notify()
        if self._thread is not None:
            self._thread.join()
        for pending in self._take_all():
            settle(pending, error=RuntimeError(f"the encoder {self.id} stopped"))

    def _serve(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._queue or self._stopped)
                if self._stopped:
                    return
                batch = self._take_batch()
            self._run(batch)

    def _take_batch(self) -> list[Pending]:
        """The queue's first requests up to max_batch_inputs inputs (always at least one)."""
        taken, count = 0, 0
        while taken < len(self._queue) and (taken == 0 or count + len(self._queue[taken].inputs) <= self.max_batch_inputs):
            count += len(self._queue[taken].inputs)
            taken += 1
        batch, self._queue = self._queue[:taken], self._queue[taken:]
        return batch

    def _take_all(self) -> list[Pending]:
        with self._ready:
            taken, self._queue = self._queue, []
        return taken

    def _run(self, batch: list[Pending]) -> None:
        try:
            results = self.runner.run([item for pending in batch for item in pending.inputs])
        except Exception as error:  # every caller of the batch hears of it
            for pending in batch:
                settle(pending, error=error)
            return
        self.num_batches += 1
        start = 0
        for pending in batch:
            settle(pending, result=results[start: start + len(pending.inputs)])
            start += len(pending.inputs)


def settle(pending: Pending, result: np.ndarray | None = None, error: BaseException | None = None) -> None:
    """Hand a result or an error to its caller's event loop (a closed loop: nobody waits)."""
    def deliver() -> None:
        if pending.future.done():
            return
        if error is not None:
            pending.future.set_exception(error)
        else:
            pending.future.set_result(result)

    try:
        pending.loop.call_soon_threadsafe(deliver)
    except RuntimeError:
        pass
