"""The engine's outputs (engine/host/request.py) folded into what `LLM` and `AsyncLLM`
return, shaped as vLLM's offline results (flint/outputs.py)."""

from __future__ import annotations

from collections.abc import Sequence

from engine.host.request import Request
from engine.host.request import RequestOutput as EngineOutput
from engine.text.tokenizer import Tokenizer
from flint.outputs import (BeamSearchOutput, BeamSearchSequence, CompletionOutput, Logprob, PromptLogprobs,
                           RequestOutput)
from flint.sampling_params import SamplingParams

Prompt = str | list[int]


def prompts_of(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """One prompt (a text, or token ids), or a list of them, as a list."""
    if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
        return [prompts]
    return list(prompts)


def per_prompt(sampling_params, count: int) -> list[SamplingParams]:
    if sampling_params is None or isinstance(sampling_params, SamplingParams):
        return [sampling_params or SamplingParams()] * count
    if len(sampling_params) != count:
        raise ValueError(f"sampling_params lists one SamplingParams a prompt: {count} prompts, "
                         f"{len(sampling_params)} given")
    return list(sampling_params)


def new_result(request_id: str, prompt: Prompt, params: SamplingParams,
               tokenizer: Tokenizer) -> tuple[RequestOutput, list[Request]]:
    """The empty result of one prompt, and the engine requests of its choices."""
    ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
    result = RequestOutput(request_id, prompt if isinstance(prompt, str) else None, ids,
                           [CompletionOutput(index) for index in range(params.n)])
    return result, params.engine_requests(request_id, ids, tokenizer)


def fold(result: RequestOutput, completion: CompletionOutput, output: EngineOutput) -> None:
    """One step's news for a choice, added to it (and the prompt's logprobs to its result)."""
    completion.token_ids.extend(output.new_token_ids)
    completion.text += output.text
    if output.logprobs is not None:
        completion.logprobs = completion.logprobs or []
        for entry in output.logprobs:
            alternatives = {token: Logprob(value) for token, value in entry.top}
            completion.logprobs.append({**alternatives, entry.token_id: Logprob(entry.logprob, entry.sampling_logprob,
                                                                                entry.rank)})
            completion.cumulative_logprob = (completion.cumulative_logprob or 0.0) + entry.logprob
    if output.prompt_logprobs is not None and result.prompt_logprobs is None:
        result.prompt_logprobs = prompt_logprobs(output)
    result.num_cached_tokens = max(result.num_cached_tokens, output.num_cached_tokens)
    if output.finished:
        completion.finish_reason, completion.stop_reason = output.finish_reason, output.stop_reason


def prompt_logprobs(output: EngineOutput) -> PromptLogprobs:
    """vLLM's prompt_logprobs: None for the first token (nothing conditions it), then each
    token's Logprob with its top alternatives."""
    entries: PromptLogprobs = [None]
    for entry in output.prompt_logprobs:
        entries.append({**{token: Logprob(value) for token, value in entry.top},
                        entry.token_id: Logprob(entry.logprob, rank=entry.rank)})
    return entries


def beam_output(result: RequestOutput, output: EngineOutput) -> BeamSearchOutput:
    """A finished beam search's hypotheses, best first, each with its prompt's tokens."""
    return BeamSearchOutput([BeamSearchSequence(tokens=result.prompt_token_ids + beam.token_ids, text=beam.text,
                                                cum_logprob=beam.cumulative_logprob, score=beam.score,
                                                finish_reason=beam.finish_reason)
                             for beam in output.beams or ()])
