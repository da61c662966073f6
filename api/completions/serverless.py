"""Friendli's serverless completions answers (seed 004), served at /serverless/v1/completions.

The request is the same merged body as /v1/completions, planned the same way; only the
answer differs:
- whole: `{"choices": [{index, seed, text, tokens}], "usage": {...}}`, no id or finish reason;
- stream: one `token_sampled` event per generated token (`index`, `text`, `token`), then one
  `complete` event with every choice whole and the usage; no `data: [DONE]` after it.
When asked, each token also carries its `logprob` (`include_output_logprobs`, or any
`logprobs`) and its `logit` (`include_output_logits`: the raw model logit, before any
sampling processing); a choice then carries the `logprobs` and `logits` lists. Seed 004
names no place for them: these optional fields are Flint's (spec/openapi/friendli-serverless-completions.yaml).

The events have no place for a thinking section apart from the text, so a request asking for
thinking (a reasoning control that asks for it, on a model that reasons) is a 400 naming
the field; without a control the text is raw, as on /v1/completions.

The engine sends a choice's tokens a step (or a decode window) at a time, with the text
that became safe to show. `TokenTexts` cuts that text into per-token pieces, so that a
`token_sampled` event's text is its own token's wherever the output stage let it through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from litestar import Response

from api.completions.plan import CompletionPlan, plan_completion
from api.completions.reasoning import splits
from api.completions.render import CompletionContext
from api.core.errors import invalid
from api.core.generation import ChoiceEvent, ChoiceResult, Generation, Results
from api.core.state import ServerState
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.tokenizer import Tokenizer
from generated import friendli_serverless_completions as serverless


async def plan_serverless(body: Any, server: ServerState) -> CompletionPlan:
    """The /v1/completions plan, refusing thinking split off the text (see the module docstring)."""
    planned = await plan_completion(body, server)
    if splits(planned.reasoning) and planned.reasoning.ask.think:
        field = planned.reasoning.ask.field
        raise invalid(field, f"`{field}` asks for thinking apart from the text, which Friendli's serverless "
                             "answers have no place for: use /v1/completions")
    return planned


async def whole(plan: CompletionPlan, generation: Generation, results: list[ChoiceResult]) -> Response:
    """The non-streamed serverless answer."""
    context = CompletionContext(plan, generation)
    response = serverless.ServerlessCompletionsResponse(
        choices=[choice(context, result) for result in results], usage=usage(generation))
    return Response(response.model_dump(mode="json", exclude_unset=True))


def usage(generation: Generation) -> serverless.ServerlessCompletionUsage:
    counts = generation.usage
    return serverless.ServerlessCompletionUsage(
        prompt_tokens=counts.num_prompt_tokens, completion_tokens=counts.num_completion_tokens,
        total_tokens=counts.num_prompt_tokens + counts.num_completion_tokens)


def choice(context: CompletionContext, result: ChoiceResult) -> serverless.ServerlessCompletionChoice:
    """One finished choice; the logprob and logit lists only when asked."""
    plan = context.plan
    extra: dict[str, Any] = {}  # set only when asked: a stream event writes the fields set
    if plan.logprobs is not None:
        extra["logprobs"] = [entry.logprob for entry in result.logprobs]
    if plan.logits:
        extra["logits"] = result.logits
    return serverless.ServerlessCompletionChoice(
        index=result.index, seed=result.seed, text=context.echo_text(result.prompt_index) + result.text,
        tokens=result.token_ids, **extra)


async def events(plan: CompletionPlan, generation: Generation) -> AsyncIterator[Any]:
    """`token_sampled` events as tokens come, then the `complete` event."""
    context = CompletionContext(plan, generation)
    results = Results(plan.choices)
    # Not `choice` for the planned one: Python 3.12 inlines comprehensions (PEP 709), and
    # 3.12.1 then reads the module's `choice` below as this function's unbound local.
    texts = {planned.index: TokenTexts(context.tokenizer, planned.prompt_token_ids) for planned in plan.choices}
    echoed: set[int] = set()
    async with aclosing(generation.events()) as choice_events:
        async for event in choice_events:
            results.add(event)
            pieces = texts[event.index].split(event.token_ids, event.text)
            if pieces and event.index not in echoed:  # an echo comes before the first token's text
                echoed.add(event.index)
                pieces[0] = context.echo_text(event.prompt_index) + pieces[0]
            for position, text in enumerate(pieces):
                yield token_sampled(plan, event, position, text)
    yield serverless.CompleteEvent(event="complete", choices=[choice(context, result) for result in results.ordered()],
                                   usage=usage(generation))


def token_sampled(plan: CompletionPlan, event: ChoiceEvent, position: int, text: str) -> serverless.TokenSampledEvent:
    """The event of the event's `position`-th token (its logprob and logit when asked)."""
    extra = {}
    if plan.logprobs is not None and event.logprobs:
        extra["logprob"] = event.logprobs[position].logprob
    if plan.logits and event.logits:
        extra["logit"] = event.logits[position]
    return serverless.TokenSampledEvent(event="token_sampled", index=event.index, text=text,
                                        token=event.token_ids[position], **extra)


class TokenTexts:
    """Cuts a choice's streamed text into one piece per token.

    A token's piece is the text its own decoding adds, as far as the output stage has
    released it (it holds text back inside a UTF-8 character or a possible stop string, and
    cuts a stop string off); the last token of each engine output takes whatever that
    output's text has left, so the pieces always join to exactly the choice's text."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int]) -> None:
        self.detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids=prompt_ids, skip_special_tokens=True)
        self.num_decoded = 0  # characters the token-by-token decoding has produced
        self.num_given = 0  # characters of the released text handed to tokens so far
        self.pending = ""  # released text not yet handed to a token

    def split(self, token_ids: list[int], text: str) -> list[str]:
        self.pending += text
        pieces = []
        for position, token in enumerate(token_ids):
            self.num_decoded += len(self.detokenizer.push([token]))
            take = len(self.pending) if position == len(token_ids) - 1 else self.num_decoded - self.num_given
            piece, self.pending = self.pending[:max(take, 0)], self.pending[max(take, 0):]
            self.num_given += len(piece)
            pieces.append(piece)
        return pieces
