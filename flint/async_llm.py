"""`AsyncLLM`: the engine on a background thread (engine/async_engine.py, as `flint serve`
runs it), for programs inside an event loop: each `generate` streams its result as it
grows, while other coroutines, and other generations, go on."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Mapping

from engine.async_engine import DRAIN, AsyncEngine
from engine.engine import Engine
from flint.loading import EngineHolder
from flint.outputs import RequestOutput
from flint.results import Prompt, fold, new_result
from flint.sampling_params import SamplingParams

_DONE = object()


class AsyncLLM(EngineHolder):
    """`LLM`'s options (flint/loading.py), its engine on a thread of its own: `generate` is an
    async iterator, the weights and sleep calls are coroutines that wait for the requests in
    flight (`mode` "drain") or end them ("abort")."""

    def _bind(self, engine: Engine) -> None:
        self.engine = AsyncEngine(engine)
        self.engine.start()
        self.tokenizer = engine.tokenizer
        self._ids = itertools.count()

    async def generate(self, prompt: Prompt, sampling_params: SamplingParams | None = None) -> AsyncIterator[RequestOutput]:
        """The prompt's RequestOutput after each step that added to it (the same object, grown),
        the last one finished. Leaving the iteration early aborts its choices."""
        result, requests = new_result(f"async-{next(self._ids)}", prompt, sampling_params or SamplingParams(),
                                      self.tokenizer)
        completions = {request.request_id: completion for request, completion in zip(requests, result.outputs)}
        news: asyncio.Queue = asyncio.Queue()
        tasks = [asyncio.create_task(self._choice(request, news)) for request in requests]
        remaining = len(tasks)
        try:
            while remaining:
                request_id, item = await news.get()
                if item is _DONE:
                    remaining -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    fold(result, completions[request_id], item)
                    yield result
        finally:
            for task in tasks:  # a choice still streaming is aborted (its generator's exit)
                task.cancel()

    async def _choice(self, request, news: asyncio.Queue) -> None:
        try:
            async for output in self.engine.generate(request):
                news.put_nowait((request.request_id, output))
        except Exception as error:  # refused, failed or aborted: the caller's to see
            news.put_nowait((request.request_id, error))
        news.put_nowait((request.request_id, _DONE))

    async def update_weights(self, params: Mapping | None = None, *, path: str | os.PathLike | None = None,
                             mode: str = DRAIN) -> int:
        return await self.engine.control(lambda engine: engine.residency.update_weights(params, path), mode)

    async def sleep(self, level: int = 1, mode: str = DRAIN) -> None:
        await self.engine.control(lambda engine: engine.residency.sleep(level), mode)

    async def wake_up(self) -> None:
        await self.engine.control(lambda engine: engine.residency.wake_up())

    async def reset_prefix_cache(self) -> None:
        await self.engine.control(lambda engine: engine.residency.reset_prefix_cache())

    @property
    def weights_version(self) -> int:
        return self.engine.engine.residency.version

    def shutdown(self) -> None:
        """Abort what is in flight and stop the engine's thread."""
        self.engine.stop()
