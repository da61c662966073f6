"""`LLM`: the engine of `flint serve` in this process, for offline generation and training
loops.

Every prompt of a `generate` call goes into the engine at once and is run by continuous
batching, as concurrent HTTP requests are; results come back in the prompts' order.
Between calls the weights can be replaced in place (`update_weights`) and the device's
memory released (`sleep`, `wake_up`): engine/residency.py.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from engine.config import AUTO, EngineConfig, default_num_pages
from engine.engine import Engine
from engine.host.heap import settle_after_load
from engine.host.request import BeamSearchParams as EngineBeams
from engine.host.request import Request
from engine.host.request import RequestOutput as EngineOutput
from flint.beam_search import BeamSearchParams
from flint.chat import Message, chat_prompt_ids, conversations_of
from flint.outputs import BeamSearchOutput, RequestOutput
from flint.progress import progress
from flint.results import Prompt, beam_output, fold, new_result, per_prompt, prompts_of
from flint.sampling_params import SamplingParams


class LLM:
    """A model loaded and compiled in this process: `model` as `flint serve --model` takes it
    (None: the embedded SmolLM2-135M-Instruct), the engine's options by their `flint serve`
    names (`max_model_len`, `max_num_seqs`, `dtype`, `quantization`, `kv_cache_dtype`, ...),
    `tensor_parallel_size` for the devices to split over. Unset options take `flint
    serve`'s defaults (on a CPU and a GGUF file: int8 weights through the native kernels)."""

    def __init__(self, model: str | None = None, *, tensor_parallel_size: int = 1, download: bool = False,
                 **engine_options) -> None:
        self._bind(load_engine(model, tensor_parallel_size, download, engine_options))

    @classmethod
    def from_engine(cls, engine: Engine) -> LLM:
        """An LLM over an engine already built (tests, tools)."""
        llm = cls.__new__(cls)
        llm._bind(engine)
        return llm

    def _bind(self, engine: Engine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self._ids = itertools.count()

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        """One RequestOutput a prompt (a text, or token ids), in order; `sampling_params` one for
        all or one a prompt. A progress bar on a terminal's stderr where `use_tqdm`."""
        prompts = prompts_of(prompts)
        results, owners = [], {}
        with self._queued(owners):
            for prompt, params in zip(prompts, per_prompt(sampling_params, len(prompts))):
                result, requests = new_result(str(next(self._ids)), prompt, params, self.tokenizer)
                results.append(result)
                for completion, request in zip(result.outputs, requests):
                    self._add(request, owners, (result, completion))
        self._drive(owners, use_tqdm, lambda owner, output: fold(*owner, output))
        return results

    def chat(self, messages: Sequence[Message] | Sequence[Sequence[Message]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None, use_tqdm: bool = True, *,
             tools: Sequence[Mapping] | None = None, add_generation_prompt: bool = True,
             chat_template_kwargs: Mapping[str, Any] | None = None) -> list[RequestOutput]:
        """`generate` over conversations (one, or a list), each rendered by the model's chat
        template with `tools` (OpenAI's function tools) written in as the HTTP API writes them."""
        prompts = [chat_prompt_ids(self.tokenizer, conversation, tools, add_generation_prompt, chat_template_kwargs)
                   for conversation in conversations_of(messages)]
        return self.generate(prompts, sampling_params, use_tqdm)

    def beam_search(self, prompts: Prompt | Sequence[Prompt], params: BeamSearchParams,
                    use_tqdm: bool = False) -> list[BeamSearchOutput]:
        """A beam search of `params.beam_width` beams a prompt, all prompts batched together;
        each prompt's hypotheses, best first."""
        prompts = prompts_of(prompts)
        results, owners, done = [], {}, {}
        with self._queued(owners):
            for prompt in prompts:
                result, (request,) = new_result(str(next(self._ids)), prompt, params.sampling(), self.tokenizer)
                request.beam = EngineBeams(num_beams=params.beam_width, length_penalty=params.length_penalty)
                results.append(result)
                self._add(request, owners, result)
        self._drive(owners, use_tqdm, lambda result, output: done.update({id(result): beam_output(result, output)})
                    if output.finished else None)
        return [done[id(result)] for result in results]

    def stream(self, prompt: Prompt, sampling_params: SamplingParams | None = None) -> Iterator[RequestOutput]:
        """One prompt's RequestOutput after each step that added to it (the same object, grown),
        the last one finished; one choice. Leaving the iteration early aborts it."""
        params = sampling_params or SamplingParams()
        if params.n != 1:
            raise ValueError("stream generates one choice: SamplingParams.n must be 1")
        result, (request,) = new_result(str(next(self._ids)), prompt, params, self.tokenizer)
        for output in self.stream_request(request):
            fold(result, result.outputs[0], output)
            yield result

    def stream_request(self, request: Request) -> Iterator[EngineOutput]:
        """The engine's outputs of one engine request (engine/host/request.py) as the steps
        produce them, for callers that build their own (the `flint` commands: a thinking
        section kept apart). The request is queued at once (a ValueError refuses it here);
        leaving the iteration early aborts it and leaves the engine idle."""
        self.engine.add_request(request)
        return self._outputs_of(request.request_id)

    def _outputs_of(self, request_id: str) -> Iterator[EngineOutput]:
        try:
            while self.engine.has_unfinished():
                for output in self.engine.step():
                    if output.request_id == request_id:
                        yield output
        finally:
            self.engine.abort(request_id)
            while self.engine.has_unfinished():
                self.engine.step()

    def _add(self, request: Request, owners: dict, owner) -> None:
        self.engine.add_request(request)
        owners[request.request_id] = owner

    def _queued(self, owners: dict):
        """A context that aborts what it queued if queueing fails part way."""
        return _AbortOnError(self.engine, owners)

    def _drive(self, owners: dict, use_tqdm: bool, take: Callable[[Any, EngineOutput], None]) -> None:
        with progress(len(owners), use_tqdm and sys.stderr.isatty()) as advance:
            while self.engine.has_unfinished():
                for output in self.engine.step():
                    take(owners[output.request_id], output)
                    if output.finished:
                        advance()

    def update_weights(self, params: Mapping | None = None, *, path: str | os.PathLike | None = None) -> int:
        """Serve new weights from the next generation on: `params`, the checkpoint's tensor
        names (Hugging Face's) or the loader's tree to jax Arrays, or the checkpoint folder
        at `path`. Re-laid on the devices as served (fused, quantized, sharded) by one jitted
        program, compiled at the first update only; the prefix cache is reset. Returns the
        weights' new version. ValueError names a tensor missing, unexpected, misshapen or
        of a dtype other than float32, bfloat16 and float16."""
        return self.engine.residency.update_weights(params, path)

    @property
    def weights_version(self) -> int:
        """0 for the weights loaded at start, one more with each `update_weights`."""
        return self.engine.residency.version

    def sleep(self, level: int = 1) -> None:
        """Release the KV cache's device memory (level 1), and the weights' too (level 2),
        for a trainer to use; `wake_up` brings them back. Generating meanwhile raises
        EngineAsleepError."""
        self.engine.residency.sleep(level)

    def wake_up(self) -> None:
        """Undo `sleep`: after level 2 the weights are read again from where they last came
        from (a folder, or the model), unless `update_weights` gave new ones meanwhile."""
        self.engine.residency.wake_up()

    @property
    def is_sleeping(self) -> bool:
        return self.engine.residency.sleep_level > 0

    def reset_prefix_cache(self) -> None:
        self.engine.residency.reset_prefix_cache()


class _AbortOnError:
    def __init__(self, engine: Engine, owners: dict) -> None:
        self.engine, self.owners = engine, owners

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, *_) -> None:
        if kind is not None:  # nothing of this call stays queued behind the error
            for queued in self.owners:
                self.engine.abort(queued)


def load_engine(model: str | None, tensor_parallel_size: int, download: bool, engine_options: dict) -> Engine:
    """The engine `LLM(...)` and `AsyncLLM(...)` serve, loaded and compiled."""
    from engine.loader.source import resolve_model

    config = EngineConfig(mesh_shape=(tensor_parallel_size,), **served_defaults(engine_options))
    engine = Engine.from_model(resolve_model(model, download), config)
    # As `flint serve` does: the loaded engine's objects frozen out of the cyclic collector's
    # walks, which otherwise took a third of a step's host time at 256 sequences
    # (engine/host/heap.py).
    settle_after_load()
    return engine


def served_defaults(options: dict) -> dict:
    """`options` with what `flint serve` chooses where they are silent: the quantization for
    the checkpoint and the backend (auto), and KV pages for an eighth of every sequence."""
    options = {"quantization": AUTO, **options}
    if "num_pages" not in options:
        defaults = EngineConfig()
        options["num_pages"] = default_num_pages(options.get("max_model_len", defaults.max_model_len),
                                                 options.get("max_num_seqs", defaults.max_num_seqs),
                                                 options.get("page_size", defaults.page_size))
    return options
