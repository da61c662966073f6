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
from contextlib import contextmanager
from typing import Any

from engine.engine import Engine
from engine.host.request import BeamSearchParams as EngineBeams
from engine.host.request import Request
from engine.host.request import RequestOutput as EngineOutput
from flint.beam_search import BeamSearchParams
from flint.chat import Message, chat_prompt_ids, conversations_of
from flint.loading import EngineHolder
from flint.outputs import BeamSearchOutput, RequestOutput
from flint.progress import progress
from flint.results import Prompt, beam_output, fold, new_result, per_prompt, prompts_of
from flint.sampling_params import SamplingParams


class LLM(EngineHolder):
    """A model loaded and compiled in this process (flint/loading.py: the options, as `flint
    serve` takes them), generating in the calling thread."""

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
        def take(result: RequestOutput, output: EngineOutput) -> None:
            if output.finished:  # a search's one output, with every hypothesis
                done[id(result)] = beam_output(result, output)

        self._drive(owners, use_tqdm, take)
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

    @contextmanager
    def _queued(self, owners: dict) -> Iterator[None]:
        """Queueing a call's requests: if it fails part way, what it queued is aborted, so
        nothing of the call stays behind the error."""
        try:
            yield
        except BaseException:
            for queued in owners:
                self.engine.abort(queued)
            raise

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
