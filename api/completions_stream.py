"""A /v1/completions stream: Fireworks/OpenAI text_completion chunks, one per engine output.

A choice's first chunk carries its echo (text and prompt logprobs) and, with
`return_token_ids`, its prompt's token ids. The chunk that finishes the last choice carries
`perf_metrics` when asked; `stream_options.include_usage` adds a final chunk with no
choices and the usage."""

from __future__ import annotations

from collections.abc import AsyncIterator

from api.completions_logprobs import LogprobsWriter, generated_entries
from api.completions_response import CompletionContext, merge_logprobs, perf_metrics, usage_info
from api.generation import ChoiceEvent
from generated import fireworks_completions as fireworks


async def completion_chunks(context: CompletionContext) -> AsyncIterator[fireworks.CompletionStreamResponse]:
    writers: dict[int, LogprobsWriter] = {}
    num_finished = 0
    async for event in context.generation.events():
        first = event.index not in writers
        if first:
            writers[event.index] = context.writer()
        choice = stream_choice(context, event, writers[event.index], first)
        chunk = new_chunk(context, [choice])
        num_finished += event.finish_reason is not None
        if num_finished == len(context.plan.choices) and context.plan.perf_metrics:
            chunk.perf_metrics = perf_metrics(context.generation)
        yield chunk
    if context.plan.include_usage:
        chunk = new_chunk(context, [])
        chunk.usage = usage_info(context.generation)
        yield chunk


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
