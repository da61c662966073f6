"""Engine results to /v1/completions answers: one JSON body, or text_completion stream chunks.

A choice carries the OpenAI/Fireworks fields and, always, Friendli's `seed` (the seed
actually used) and `tokens` (the generated ids); with `include_output_logits`, `logits`:
each token's raw model logit (a stream chunk's choice: those of its tokens). Friendli's
serverless shapes are api/completions/serverless.py. Non-streamed responses always carry the
Fireworks performance headers; `perf_metrics_in_response` adds the same figures to the body
(to the last chunk of a stream).

A stream sends one chunk per engine output. A choice's first chunk carries its echo (text
and prompt logprobs) and, with `return_token_ids`, its prompt's token ids; with
`raw_output`, a choice's last chunk carries what the model saw and produced. The chunk that
finishes the last choice carries `perf_metrics` when asked; `stream_options.include_usage`
adds a final chunk with no choices and the usage (vLLM's `continuous_usage_stats`: every
chunk carries the usage so far, too).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from litestar import Response

from api.completions.logprobs import LogprobsWriter, generated_entries, merge_logprobs, prompt_entries
from api.completions.plan import CompletionPlan
from api.completions.reasoning import add_to_choice, add_to_usage, splits
from api.core.generation import ChoiceEvent, ChoiceResult, Generation, Results
from engine.config import ModelConfig
from engine.text.tokenizer import Tokenizer
from generated import fireworks_completions as fireworks
from generated.fireworks_streaming import PerfMetrics


@dataclass
class CompletionContext:
    """What every part of one answer shares."""

    plan: CompletionPlan
    generation: Generation
    id: str = field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def tokenizer(self) -> Tokenizer:
        return self.generation.server.tokenizer

    @property
    def model_id(self) -> str:
        return self.generation.model_id

    def writer(self) -> LogprobsWriter:
        return LogprobsWriter(self.tokenizer, self.plan.content_logprobs, self.plan.logprobs or 0, self.model_config)

    @property
    def model_config(self) -> ModelConfig:
        return self.generation.server.running_engine.engine.model_config

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
        **speculation_metrics(generation),
    })
    return metrics.model_dump(by_alias=True, exclude_none=True)


def speculation_metrics(generation: Generation) -> dict[str, Any]:
    """Fireworks' predicted-output metrics, when the request had drafts: the predicted
    tokens, how many the outputs kept, and every draft token checked with the share kept
    at each draft position (predicted and n-gram drafts alike)."""
    usage = generation.usage
    num_predicted = sum(len(choice.prediction) for choice in generation.choices)
    if not (usage.speculation or num_predicted):
        return {}
    kept, rejected = usage.num_accepted_draft_tokens, usage.num_rejected_draft_tokens
    return {
        "speculation-prompt-tokens": num_predicted,
        "speculation-prompt-matched-tokens": kept,
        "speculation-generated-tokens": kept + rejected,
        "speculation-acceptance": [round(share, 4) for share in usage.acceptance_by_position()],
    }


def perf_headers(generation: Generation) -> dict[str, str]:
    """The same metrics as `fireworks-*` response headers."""
    return {f"fireworks-{name}": ",".join(map(str, value)) if isinstance(value, list) else str(value)
            for name, value in perf_metrics(generation).items()}


async def whole(plan: CompletionPlan, generation: Generation, results: list[ChoiceResult]) -> Response:
    """The non-streamed answer, with the performance headers."""
    context = CompletionContext(plan, generation)
    response = fireworks.CompletionResponse(
        id=context.id, object="text_completion", created=context.created, model=context.model_id,
        choices=[fireworks.Choice(**choice_fields(context, result)) for result in results],
        usage=usage_info(generation),
    )
    if plan.perf_metrics:
        response.perf_metrics = perf_metrics(generation)
    body = response.model_dump(mode="json", exclude_unset=True, warnings=False)
    for choice, result in zip(body["choices"], results):
        choice.update(seed=result.seed, tokens=result.token_ids)  # Friendli's choice fields
        if plan.logits:
            choice["logits"] = result.logits  # one per token of `tokens`
        if splits(plan.reasoning):
            add_to_choice(choice, result.reasoning_text, whole=True)
    if splits(plan.reasoning):
        add_to_usage(body["usage"], generation.usage.num_reasoning_tokens)
    return Response(body, headers=perf_headers(generation))


def choice_fields(context: CompletionContext, result: ChoiceResult) -> dict[str, Any]:
    plan = context.plan
    echo = context.echo_text(result.prompt_index)
    fields: dict[str, Any] = dict(index=result.index, text=echo + result.text,
                                  finish_reason=result.finish_reason, logprobs=None)
    if plan.logprobs is not None:
        fields["logprobs"] = completion_logprobs(context, result, echo)
    if plan.return_token_ids:
        fields.update(prompt_token_ids=plan.prompts[result.prompt_index], token_ids=result.token_ids)
    if plan.raw_output:
        fields["raw_output"] = raw_output(context, result)
    return fields


def completion_logprobs(context: CompletionContext, result: ChoiceResult, echo: str) -> Any:
    writer = context.writer()
    echoed = context.prompt_logprobs(writer, result.prompt_index, result.prompt_logprobs)
    writer.offset = len(echo)
    generated = writer.write(generated_entries(result.logprobs))
    return generated if echoed is None else merge_logprobs(echoed, generated)


def raw_output(context: CompletionContext, result: ChoiceResult) -> fireworks.RawOutput:
    """What the model saw and produced, before stop strings cut the text."""
    prompt = context.plan.prompts[result.prompt_index]
    text = context.plan.prompt_texts[result.prompt_index]
    completion_logprobs = None
    if context.plan.logprobs is not None:
        writer = LogprobsWriter(context.tokenizer, True, context.plan.logprobs, context.model_config)
        completion_logprobs = writer.write(generated_entries(result.logprobs))
    return fireworks.RawOutput(
        prompt_fragments=[text] if text is not None else list(prompt), prompt_token_ids=prompt,
        completion=context.tokenizer.decode(result.token_ids), completion_token_ids=result.token_ids,
        completion_logprobs=completion_logprobs,
    )


async def completion_chunks(plan: CompletionPlan, generation: Generation) -> AsyncIterator[Any]:
    """The chunks of a streamed answer (see the module docstring)."""
    context = CompletionContext(plan, generation)
    writers: dict[int, LogprobsWriter] = {}
    results = Results(plan.choices)  # what raw_output reports at a choice's end
    num_finished = 0
    async with aclosing(generation.events()) as events:
        async for event in events:
            chunk = event_chunk(context, event, writers, results, num_finished)
            if plan.continuous_usage:
                chunk.usage = usage_info(generation)  # the counts so far
            yield with_extensions(plan, chunk, event)
            num_finished += event.finish_reason is not None
    if plan.include_usage:
        chunk = new_chunk(context, [])
        chunk.usage = usage_info(generation)
        yield with_reasoning_usage(plan, chunk, generation)


def event_chunk(context: CompletionContext, event: ChoiceEvent, writers: dict[int, LogprobsWriter],
                results: Results, num_finished: int) -> fireworks.CompletionStreamResponse:
    """The chunk of one choice event (`num_finished`: the choices finished before it)."""
    plan = context.plan
    first = event.index not in writers
    if first:
        writers[event.index] = context.writer()
    if plan.raw_output:
        results.add(event)
    choice = stream_choice(context, event, writers[event.index], first)
    if plan.raw_output and event.finish_reason is not None:
        choice.raw_output = raw_output(context, results.by_index[event.index])
    chunk = new_chunk(context, [choice])
    if num_finished + (event.finish_reason is not None) == len(plan.choices) and plan.perf_metrics:
        chunk.perf_metrics = perf_metrics(context.generation)
    return chunk


def with_extensions(plan: CompletionPlan, chunk: fireworks.CompletionStreamResponse,
                    event: ChoiceEvent) -> fireworks.CompletionStreamResponse | dict[str, Any]:
    """The chunk with what the Fireworks chunk model does not define, when asked, written as
    a plain object: its choice's `logits` (the chunk's tokens' raw model logits) and the
    piece of `reasoning_content` it adds (api/completions/reasoning.py)."""
    if not (plan.logits or splits(plan.reasoning)):
        return chunk
    body = chunk.model_dump(mode="json", by_alias=True, exclude_unset=True)
    choice = body["choices"][0]
    if plan.logits:
        choice["logits"] = event.logits or []
    if splits(plan.reasoning):
        add_to_choice(choice, event.reasoning_text, whole=False)
    return body


def with_reasoning_usage(plan: CompletionPlan, chunk: fireworks.CompletionStreamResponse,
                         generation: Generation) -> fireworks.CompletionStreamResponse | dict[str, Any]:
    """The usage chunk, with its reasoning tokens when the answer splits its thinking off."""
    if not splits(plan.reasoning):
        return chunk
    body = chunk.model_dump(mode="json", by_alias=True, exclude_unset=True)
    add_to_usage(body["usage"], generation.usage.num_reasoning_tokens)
    return body


def new_chunk(context: CompletionContext, choices: list) -> fireworks.CompletionStreamResponse:
    return fireworks.CompletionStreamResponse(id=context.id, object="text_completion", created=context.created,
                                              model=context.model_id, choices=choices)


def stream_choice(context: CompletionContext, event: ChoiceEvent, writer: LogprobsWriter,
                  first: bool) -> fireworks.CompletionResponseStreamChoice:
    plan = context.plan
    echo = context.echo_text(event.prompt_index) if first else ""
    fields = dict(index=event.index, text=echo + event.text, finish_reason=event.finish_reason, logprobs=None)
    if plan.logprobs is not None:
        echoed = context.prompt_logprobs(writer, event.prompt_index, event.prompt_logprobs) if first else None
        if first:
            writer.offset = len(echo)
        generated = writer.write(generated_entries(event.logprobs or []))
        fields["logprobs"] = generated if echoed is None else merge_logprobs(echoed, generated)
    if plan.return_token_ids:
        fields["token_ids"] = event.token_ids
        if first:
            fields["prompt_token_ids"] = plan.prompts[event.prompt_index]
    return fireworks.CompletionResponseStreamChoice(**fields)
