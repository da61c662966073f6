"""`LLM`: the engine of `flint serve` in this process, for offline generation.

Every prompt of a `generate` call goes into the engine at once and is run by continuous
batching, as concurrent HTTP requests are; results come back in the prompts' order.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Mapping, Sequence

from engine.config import AUTO, EngineConfig, default_num_pages
from engine.engine import Engine
from engine.host.request import RequestOutput as EngineOutput
from flint.outputs import CompletionOutput, Logprob, RequestOutput
from flint.sampling_params import SamplingParams

Prompt = str | list[int]


class LLM:
    """A model loaded and compiled in this process: `model` as `flint serve --model` takes it
    (None: the embedded SmolLM2-135M-Instruct), the engine's options by their `flint serve`
    names (`max_model_len`, `max_num_seqs`, `dtype`, `quantization`, `kv_cache_dtype`, ...),
    `tensor_parallel_size` for the devices to split over."""

    def __init__(self, model: str | None = None, *, tensor_parallel_size: int = 1, download: bool = False,
                 **engine_options) -> None:
        from engine.loader.source import resolve_model

        config = EngineConfig(mesh_shape=(tensor_parallel_size,), **served_defaults(engine_options))
        self._bind(Engine.from_model(resolve_model(model, download), config))

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

    def generate(self, prompts: Prompt | Sequence[Prompt], sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        """One RequestOutput a prompt (a text, or token ids), in order; `sampling_params` one for
        all or one a prompt. A progress bar on a terminal's stderr where `use_tqdm`."""
        prompts = [prompts] if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)) else list(prompts)
        params = per_prompt(sampling_params, len(prompts))
        owners: dict[str, tuple[RequestOutput, CompletionOutput]] = {}
        try:
            results = [self._submit(prompt, choice_params, owners) for prompt, choice_params in zip(prompts, params)]
        except Exception:
            for queued in owners:  # nothing of this call stays queued behind the error
                self.engine.abort(queued)
            raise
        with progress(len(owners), use_tqdm and sys.stderr.isatty()) as advance:
            while self.engine.has_unfinished():
                for output in self.engine.step():
                    completion = owners[output.request_id][1]
                    fold(completion, output)
                    if output.finished:
                        advance()
        return results

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

    def _submit(self, prompt: Prompt, params: SamplingParams, owners: dict) -> RequestOutput:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        request_id = str(next(self._ids))
        result = RequestOutput(request_id, prompt if isinstance(prompt, str) else None, ids,
                               [CompletionOutput(index) for index in range(params.n)])
        for index, request in enumerate(params.engine_requests(request_id, ids)):
            self.engine.add_request(request)
            owners[request.request_id] = (result, result.outputs[index])
        return result


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


def per_prompt(sampling_params, count: int) -> list[SamplingParams]:
    if sampling_params is None or isinstance(sampling_params, SamplingParams):
        return [sampling_params or SamplingParams()] * count
    if len(sampling_params) != count:
        raise ValueError(f"sampling_params lists one SamplingParams a prompt: {count} prompts, "
                         f"{len(sampling_params)} given")
    return list(sampling_params)


def fold(completion: CompletionOutput, output: EngineOutput) -> None:
    """One step's news for a choice, added to it."""
    completion.token_ids.extend(output.new_token_ids)
    completion.text += output.text
    if output.logprobs is not None:
        completion.logprobs = completion.logprobs or []
        for entry in output.logprobs:
            alternatives = {token: Logprob(value) for token, value in entry.top}
            completion.logprobs.append({**alternatives, entry.token_id: Logprob(entry.logprob, entry.sampling_logprob,
                                                                                entry.rank)})
            completion.cumulative_logprob = (completion.cumulative_logprob or 0.0) + entry.logprob
    if output.finished:
        completion.finish_reason, completion.stop_reason = output.finish_reason, output.stop_reason


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
