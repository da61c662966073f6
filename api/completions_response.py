"""Engine results to /v1/completions responses: one JSON body, or stream chunks.

A choice carries the OpenAI/Fireworks fields and, always, Friendli's `seed` (the seed
actually used) and `tokens` (the generated ids). Non-streamed responses always carry the
Fireworks performance headers; `perf_metrics_in_response` adds the same figures to the body
(to the last chunk of a stream)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from api.completions_logprobs import LogprobsWriter, generated_entries, prompt_entries
from api.completions_request import CompletionPlan
from api.generation import ChoiceResult, Generation
from engine.tokenizer import Tokenizer
from generated import fireworks_completions as fireworks
from generated.fireworks_streaming import PerfMetrics


@dataclass
class CompletionContext:
    """What every part of one response shares."""

    plan: CompletionPlan
    generation: Generation
    tokenizer: Tokenizer
    model_id: str
    id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    def writer(self) -> LogprobsWriter:
        return LogprobsWriter(self.tokenizer, self.plan.content_logprobs, self.plan.logprobs or 0)

    def echo_text(self, prompt_index: int) -> str:
        """The echoed prompt: its own text when echoed whole, else its last tokens decoded."""
        count, prompt = self.plan.echo_last, self.plan.prompts[prompt_index]
        text = self.plan.prompt_texts[prompt_index]
        if count is None:
            return ""
        if text is not None and count >= len(prompt):
            return text
        return self.tokenizer.decode(prompt[len(prompt) - int(min(count, len(prompt))):])

    def prompt_logprobs(self, writer: LogprobsWriter, prompt_index: int, logprobs) -> Any:
        """The echoed prompt's logprobs, or None when not asked for."""
        if self.plan.echo_last is None or self.plan.logprobs is None:
            return None
        entries = prompt_entries(self.plan.prompts[prompt_index], logprobs, self.plan.echo_last)
        return writer.write(entries)


def usage_info(generation: Generation) -> fireworks.UsageInfo:
    usage = generation.usage
    return fireworks.UsageInfo(
        prompt_tokens=usage.num_prompt_tokens, completion_tokens=usage.num_completion_tokens,
        total_tokens=usage.num_prompt_tokens + usage.num_completion_tokens,
        prompt_tokens_details=fireworks.PromptTokensDetails(cached_tokens=usage.num_cached_tokens),
    )


def perf_metrics(generation: Generation) -> dict[str, Any]:
    """Fireworks' basic metrics, by their spec names (`prompt-tokens`, ...)."""
    metrics = PerfMetrics.model_validate({
        "prompt-tokens": generation.usage.num_prompt_tokens,
        "cached-prompt-tokens": generation.usage.num_cached_tokens,
        "server-time-to-first-token": generation.timing.time_to_first_token,
        "server-processing-time": generation.timing.processing_time,
    })
    return metrics.model_dump(by_alias=True, exclude_none=True)


def perf_headers(generation: Generation) -> dict[str, str]:
    """The same metrics as `fireworks-*` response headers."""
    return {f"fireworks-{name}": str(value) for name, value in perf_metrics(generation).items()}


def completion_body(context: CompletionContext, results: list[ChoiceResult]) -> dict[str, Any]:
    """The JSON of a non-streamed response."""
    response = fireworks.CompletionResponse(
        id=context.id, object="text_completion", created=context.created, model=context.model_id,
        choices=[fireworks.Choice(**choice_fields(context, result)) for result in results],
        usage=usage_info(context.generation),
    )
    if context.plan.perf_metrics:
        response.perf_metrics = perf_metrics(context.generation)
    body = response.model_dump(mode="json", exclude_unset=True, warnings=False)
    for choice, result in zip(body["choices"], results):
        choice.update(seed=result.seed, tokens=result.token_ids)  # Friendli's choice fields
    return body


def choice_fields(context: CompletionContext, result: ChoiceResult) -> dict[str, Any]:
    plan = context.plan
    prompt = plan.prompts[result.prompt_index]
    echo = context.echo_text(result.prompt_index)
    fields: dict[str, Any] = dict(index=result.index, text=echo + result.text,
                                  finish_reason=result.finish_reason, logprobs=None)
    if plan.logprobs is not None:
        fields["logprobs"] = choice_logprobs(context, result, echo)
    if plan.return_token_ids:
        fields.update(prompt_token_ids=prompt, token_ids=result.token_ids)
    if plan.raw_output:
        fields["raw_output"] = raw_output(context, result)
    return fields


def choice_logprobs(context: CompletionContext, result: ChoiceResult, echo: str) -> Any:
    writer = context.writer()
    echoed = context.prompt_logprobs(writer, result.prompt_index, result.prompt_logprobs)
    writer.offset = len(echo)
    generated = writer.write(generated_entries(result.logprobs))
    return generated if echoed is None else merge_logprobs(echoed, generated)


def merge_logprobs(first: Any, second: Any) -> Any:
    """Two stretches of one choice's logprobs (prompt, then output) as one."""
    if isinstance(first, fireworks.NewLogProbs):
        return fireworks.NewLogProbs(content=[*first.content, *second.content])
    return fireworks.LogProbs.model_construct(**{
        name: [*getattr(first, name), *getattr(second, name)]
        for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset")})


def raw_output(context: CompletionContext, result: ChoiceResult) -> fireworks.RawOutput:
    """What the model saw and produced, before stop strings cut the text."""
    prompt = context.plan.prompts[result.prompt_index]
    text = context.plan.prompt_texts[result.prompt_index]
    completion_logprobs = None
    if context.plan.logprobs is not None:
        writer = LogprobsWriter(context.tokenizer, True, context.plan.logprobs)
        completion_logprobs = writer.write(generated_entries(result.logprobs))
    return fireworks.RawOutput(
        prompt_fragments=[text] if text is not None else list(prompt), prompt_token_ids=prompt,
        completion=context.tokenizer.decode(result.token_ids), completion_token_ids=result.token_ids,
        completion_logprobs=completion_logprobs,
    )
