"""A parsed /v1/completions body to the engine requests that serve it (`CompletionPlan`).

Decisions (see ../shared/API-DIALECTS.md for the dialect table):
- Prompts: a string, strings, token ids, lists of token ids, or Friendli's `tokens`; strings
  are tokenized with the model's special tokens, as vLLM does for completions.
- Context window: with `context_length_exceeded_behavior: truncate` (the default) max_tokens
  is lowered to what fits after the prompt (Fireworks' definition); with `error` a prompt
  plus max_tokens over the window is a 400. A prompt that leaves no room at all is a 400
  either way: the prompt itself is never cut, since that would change what is asked.
- max_tokens defaults to 16, as OpenAI's legacy completions do.
- max_tokens 0 runs a prefill only (prompt logprobs are computed to make it one).
- Friendli's `timeout` bounds the wait for the request's first output (of any choice): past
  it the request is aborted and answered 429; once served it runs to the end.
- n choices of a prompt are n engine requests: each is counted in /metrics and by
  admission control, while usage counts the prompt once (as OpenAI does).
- `response_format` (Fireworks' json_object, json_schema and GBNF grammar; Friendli's
  json_schema, json_object and regex) constrains every choice (api/core/structured.py).
- `token_index_to_replace` / `embedding_to_replace` replace the input embeddings of those
  prompt positions (api/completions/embeddings.py), for every choice of the one prompt.
- `routing_matrices` replays a mixture of experts' routing on the prompt's tokens
  (api/completions/routing.py), for every choice of the one prompt.
- `include_output_logits` returns each generated token's raw model logit (before any
  sampling processing), beside `tokens`.
- Reasoning controls (`reasoning_effort`, `thinking`) split the thinking off the text of a
  model that reasons (api/completions/reasoning.py); without them the text is raw.
- `num_beams` above 1 runs a beam search per prompt whose hypotheses, best first, are the
  prompt's choices (api/completions/beams.py has the seed's rules).
- Tokens after a stop string are not generated; the token that completed it stays in
  `tokens` / `token_ids` / logprobs (as vLLM reports it), its text is cut.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from api.completions.beams import beam_params
from api.completions.body import MODELS
from api.completions.embeddings import replaced_embeddings
from api.completions.routing import routing_replay
from api.completions.fields import REGISTRY
from api.completions.reasoning import completion_reasoning
from api.core import limits
from api.core.errors import invalid
from api.core.generation import ChoiceRequest
from api.core.prediction import prediction_token_ids
from api.core.prompt import check_prompt_fits, text_prompt_ids
from api.core.reasoning_prompt import ReasoningPlan
from api.core.sampling import (
    EngineValues,
    check_count,
    check_range,
    check_token_ids,
    choice_seed_list,
    engine_values,
    logit_bias,
    logprobs_count,
    resolve_max_tokens,
)
from api.core.state import ServerState
from api.core.structured import check_grammar, format_grammar
from engine.host.request import BeamSearchParams, SamplingParams, StopCriteria
from engine.text.grammar import Grammar

log = logging.getLogger("flint")

DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class CompletionPlan:
    """What one completions request asks for, resolved against the served model."""

    body: Any
    prompts: list[list[int]]
    prompt_texts: list[str | None]  # the text of prompts given as text
    n: int
    choices: list[ChoiceRequest]
    stream: bool
    include_usage: bool
    continuous_usage: bool  # vLLM's stream_options.continuous_usage_stats: usage so far in every chunk
    echo_last: float | None  # echo this many of the prompt's last tokens (inf: all; None: no echo)
    logprobs: int | None  # alternatives per token; None: no logprobs
    content_logprobs: bool  # OpenAI's `logprobs: true` format (else the legacy one)
    return_token_ids: bool
    raw_output: bool
    perf_metrics: bool
    timeout: float | None
    logits: bool = False  # Friendli's include_output_logits: each token's raw model logit
    reasoning: ReasoningPlan | None = None  # a reasoning control given (api/completions/reasoning.py)


async def plan_completion(body: Any, server: ServerState) -> CompletionPlan:
    """The engine requests of `body`, every value checked (400 naming the field)."""
    log_tracing_fields(body)
    stream = bool(body.stream)
    if body.stream_options is not None and not stream:
        raise invalid("stream_options", "`stream_options` is only allowed with `stream: true`")
    n = choice_count(body.n)
    beam = beam_params(body)
    prompts, texts = await prompt_token_ids(body, server)
    limits.check_choices(len(prompts), beam.num_beams if beam else n)
    echo_last = echo_count(body)
    logprobs = logprobs_of(body)
    grammar = await answer_grammar(body, server)
    embeddings = await asyncio.to_thread(replaced_embeddings, body, server, prompts)  # up to millions of numbers
    routing = await asyncio.to_thread(routing_replay, body, server, prompts)
    reasoning = completion_reasoning(body, server)
    prediction = await prediction_token_ids(body, server)
    choices = [replace(choice, grammar=grammar, embeddings=embeddings, routing_replay=routing,
                       reasoning=reasoning and reasoning.engine_reasoning(choice.prompt_token_ids, server.tokenizer))
               for choice in choice_requests(body, server, prompts, n, echo_last, logprobs, beam, prediction)]
    return CompletionPlan(
        body=body, prompts=prompts, prompt_texts=texts, n=n, choices=choices, stream=stream,
        include_usage=bool(body.stream_options and (body.stream_options.include_usage
                                                    or body.stream_options.continuous_usage_stats)),
        continuous_usage=bool(body.stream_options and body.stream_options.continuous_usage_stats),
        echo_last=echo_last, logprobs=logprobs, content_logprobs=body.logprobs is True,
        return_token_ids=bool(body.return_token_ids), raw_output=bool(body.raw_output),
        perf_metrics=bool(body.perf_metrics_in_response), timeout=body.timeout,
        logits=bool(body.include_output_logits), reasoning=reasoning,
    )


async def answer_grammar(body: Any, server: ServerState) -> Grammar | None:
    """The grammar of `response_format` (Fireworks' or Friendli's), compiled (400 if it cannot be)."""
    grammar, where = format_grammar(body.response_format, "response_format")
    await check_grammar(server, grammar, where)
    return grammar


def choice_count(n: int | None) -> int:
    """`n`, 1 by default, in [1, MAX_CHOICES]."""
    return 1 if n is None else int(check_range("n", n, 1, limits.MAX_CHOICES, integer=True))


def log_tracing_fields(body: Any) -> None:
    if body.user is not None or body.metadata or body.prompt_cache_key is not None:
        # Each cut: a field as long as the body is not logged whole.
        log.info("completion request: user=%.200r prompt_cache_key=%.200r metadata=%.500r",
                 body.user, body.prompt_cache_key, body.metadata)


async def prompt_token_ids(body: Any, server: ServerState) -> tuple[list[list[int]], list[str | None]]:
    """Each prompt's token ids, and its text where it came as text."""
    if body.prompt is not None and body.tokens is not None:
        raise invalid("tokens", "give `prompt` or `tokens`, not both")
    if body.tokens is not None:
        return [list(body.tokens)], [None]
    prompt = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if not prompt:
        raise invalid("prompt", "`prompt` must not be empty")
    if all(isinstance(item, int) for item in prompt):
        return [list(prompt)], [None]
    limits.check_list("prompt", prompt, limits.MAX_CHOICES, "prompts")
    if all(isinstance(item, str) for item in prompt):
        return await text_prompt_ids(server, prompt, "prompt"), list(prompt)
    return [list(ids) for ids in prompt], [None] * len(prompt)


def echo_count(body: Any) -> float | None:
    """How many of each prompt's last tokens to echo; `echo` echoes them all (inf)."""
    if body.echo_last is not None:
        return check_count("echo_last", body.echo_last)
    return math.inf if body.echo else None


def logprobs_of(body: Any) -> int | None:
    """Alternatives per token, or None for no logprobs."""
    logprobs = logprobs_count(body.logprobs, body.top_logprobs)
    if logprobs is None and body.include_output_logprobs:
        return 0  # Friendli: the sampled tokens' logprobs, no alternatives
    return logprobs


def stop_criteria(body: Any, values: EngineValues, vocab_size: int) -> StopCriteria:
    """Stop strings (`stop`), Friendli's stop token ids (`stop_tokens`, token sequences any
    of whose tokens stops, and `eos_token`) and the floors; the token limit is each prompt's."""
    stops = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    limits.check_strings("stop", stops, limits.MAX_STOP_STRINGS)
    sequence_ids = [token for sequence in body.stop_tokens or [] for token in sequence.tokens or []]
    limits.check_list("stop_tokens", sequence_ids, limits.MAX_STOP_TOKEN_IDS, "token ids in all")
    limits.check_list("eos_token", body.eos_token, limits.MAX_STOP_TOKEN_IDS, "token ids")
    ids = check_token_ids("stop_tokens", sequence_ids, vocab_size) + check_token_ids("eos_token", body.eos_token or [],
                                                                                       vocab_size)
    if body.min_tokens is not None and body.min_total_tokens is not None:
        raise invalid("min_total_tokens", "give `min_tokens` or `min_total_tokens`, not both")
    return values.stop_criteria(strings=stops, token_ids=ids)


def sampling_of(body: Any, values: EngineValues, tokenizer, vocab_size: int, logprobs: int | None) -> SamplingParams:
    """The planned sampling fields: biases, bans, forced tokens, n-grams, logprobs and
    Friendli's output logits (the seed and prompt logprobs are each choice's)."""
    words = tuple(body.bad_words or ())
    limits.check_strings("bad_words", words, limits.MAX_BAD_WORDS)
    token_phrases = [list(sequence.tokens or []) for sequence in body.bad_word_tokens or []]
    limits.check_list("bad_word_tokens", token_phrases, limits.MAX_BAD_WORDS, "phrases")
    limits.check_list("bad_word_tokens", max(token_phrases, key=len, default=[]), limits.MAX_PHRASE_TOKENS,
                      "tokens in one phrase")
    phrases = [tokenizer.encode(word, add_special_tokens=False) for word in words] + token_phrases
    forced = body.forced_output_tokens or []
    limits.check_list("forced_output_tokens", forced, limits.MAX_FORCED_TOKENS, "tokens")
    ngram = 0 if body.no_repeat_ngram is None else check_count("no_repeat_ngram", body.no_repeat_ngram,
                                                                limits.MAX_NO_REPEAT_NGRAM)
    return values.sampling_params(
        logit_bias=logit_bias(body.logit_bias, vocab_size),
        bad_word_tokens=tuple(check_token_ids("bad_word_tokens", phrase, vocab_size) for phrase in phrases),
        forced_output_tokens=check_token_ids("forced_output_tokens", forced, vocab_size),
        no_repeat_ngram_size=ngram if ngram > 1 else 0,  # Friendli: 1 means off
        logprobs=logprobs, output_logits=bool(body.include_output_logits))


def max_tokens_for(body: Any, prompt: list[int], max_model_len: int) -> int:
    """The output budget of one prompt, fitted to the context window."""
    requested = resolve_max_tokens(body.max_tokens, body.max_completion_tokens)
    if body.max_total_tokens is not None:
        if requested is not None:
            raise invalid("max_total_tokens", "give `max_tokens` or `max_total_tokens`, not both")
        requested = body.max_total_tokens - len(prompt)
        if requested < 1:
            raise invalid("max_total_tokens", f"`max_total_tokens` ({body.max_total_tokens}) leaves no room "
                                              f"after the prompt's {len(prompt)} tokens")
    check_prompt_fits(len(prompt), max_model_len, "prompt")
    room = max_model_len - len(prompt)
    requested = DEFAULT_MAX_TOKENS if requested is None else requested
    if requested > room and body.context_length_exceeded_behavior == "error":
        raise invalid("prompt", f"the prompt's {len(prompt)} tokens plus max_tokens {requested} exceed "
                                f"the context window of {max_model_len} tokens")
    return min(requested, room)


def choice_requests(body: Any, server: ServerState, prompts: list[list[int]], n: int,
                    echo_last: float | None, logprobs: int | None,
                    beam: BeamSearchParams | None = None, prediction: tuple[int, ...] = ()) -> list[ChoiceRequest]:
    """prompt index p, choice i -> choice index p * n + i, with the seed of choice i. A beam
    search is one request per prompt, whose beams become choices p * num_beams + i; the
    others check `prediction`'s tokens as drafts."""
    tokenizer, vocab_size = server.tokenizer, server.tokenizer.vocab_size
    values = engine_values(REGISTRY, MODELS, body.__dict__, body.model_fields_set, vocab_size)
    sampling = sampling_of(body, values, tokenizer, vocab_size, logprobs)
    stop = stop_criteria(body, values, vocab_size)
    seeds = choice_seed_list(body.seed, n)
    choices = []
    for p, prompt in enumerate(prompts):
        if not prompt:
            raise invalid("prompt", f"prompt {p} is empty")
        max_tokens = max_tokens_for(body, prompt, server.max_model_len)
        # Prompt logprobs serve the echo, and make a max_tokens 0 request a prefill.
        wants_prompt = (echo_last is not None and logprobs is not None) or max_tokens == 0
        prompt_logprobs = (logprobs or 0) if wants_prompt else None
        if beam is not None:
            choices.append(ChoiceRequest(index=p * beam.num_beams, prompt_index=p, prompt_token_ids=prompt,
                                         sampling=replace(sampling, seed=seeds[0]),
                                         stop=replace(stop, max_tokens=max_tokens), beam=beam))
            continue
        choices += [ChoiceRequest(index=p * n + i, prompt_index=p, prompt_token_ids=prompt,
                                  sampling=replace(sampling, seed=seeds[i], prompt_logprobs=prompt_logprobs),
                                  stop=replace(stop, max_tokens=max_tokens), prediction=prediction)
                    for i in range(n)]
    return choices
