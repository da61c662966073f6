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
- n choices of a prompt are n engine requests: each is counted in /metrics, while usage
  counts the prompt once (as OpenAI does).
- Tokens after a stop string are not generated; the token that completed it stays in
  `tokens` / `token_ids` / logprobs (as vLLM reports it), its text is cut.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from api.generation import ChoiceRequest
from api.sampling_fields import (check_range, choice_seed_list, invalid, logprobs_count, resolve_max_tokens,
                                 sampling_params)
from api.state import ServerState

log = logging.getLogger("flint")

DEFAULT_MAX_TOKENS = 16
MAX_CHOICES = 128
MAX_STOP_STRINGS = 4
# Request fields read as they are by api/sampling_fields.py.
PLAIN_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "typical_p", "xtc_threshold",
                         "xtc_probability", "frequency_penalty", "presence_penalty", "repetition_penalty",
                         "mirostat_target", "mirostat_lr", "logit_bias", "no_repeat_ngram", "min_tokens",
                         "min_total_tokens", "ignore_eos", "forced_output_tokens")


@dataclass(frozen=True)
class CompletionPlan:
    """What one completions request asks for, resolved against the served model."""

    prompts: list[list[int]]
    prompt_texts: list[str | None]  # the text of prompts given as text
    n: int
    choices: list[ChoiceRequest]
    stream: bool
    include_usage: bool
    echo_last: float | None  # echo this many of the prompt's last tokens (inf: all; None: no echo)
    logprobs: int | None  # alternatives per token; None: no logprobs
    content_logprobs: bool  # OpenAI's `logprobs: true` format (else the legacy one)
    return_token_ids: bool
    raw_output: bool
    perf_metrics: bool
    timeout: float | None


def plan_completion(body: Any, server: ServerState) -> CompletionPlan:
    """The engine requests of `body`, every value checked (400 naming the field)."""
    server.require_model(body.model)
    log_tracing_fields(body)
    tokenizer = server.tokenizer
    prompts, texts = prompt_token_ids(body, tokenizer)
    n = body.n if body.n is not None else 1
    check_range("n", n, 1, MAX_CHOICES)
    echo_last = echo_count(body)
    logprobs = logprobs_count(body.logprobs, body.top_logprobs)
    if logprobs is None and body.include_output_logprobs:
        logprobs = 0  # Friendli: the sampled tokens' logprobs, no alternatives
    choices = choice_requests(body, server, prompts, n, echo_last, logprobs)
    stream = bool(body.stream)
    if body.stream_options is not None and not stream:
        raise invalid("stream_options", "`stream_options` is only allowed with `stream: true`")
    return CompletionPlan(
        prompts=prompts, prompt_texts=texts, n=n, choices=choices, stream=stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        echo_last=echo_last, logprobs=logprobs, content_logprobs=body.logprobs is True,
        return_token_ids=bool(body.return_token_ids), raw_output=bool(body.raw_output),
        perf_metrics=bool(body.perf_metrics_in_response), timeout=body.timeout,
    )


def log_tracing_fields(body: Any) -> None:
    if body.user is not None or body.metadata or body.prompt_cache_key is not None:
        log.info("completion request: user=%r prompt_cache_key=%r metadata=%r",
                 body.user, body.prompt_cache_key, body.metadata)


def prompt_token_ids(body: Any, tokenizer) -> tuple[list[list[int]], list[str | None]]:
    """Each prompt's token ids, and its text where it came as text."""
    if body.prompt is not None and body.tokens is not None:
        raise invalid("tokens", "give `prompt` or `tokens`, not both")
    if body.tokens is not None:
        return [list(body.tokens)], [None]
    prompt = body.prompt
    if isinstance(prompt, str):
        prompt = [prompt]
    if not prompt:
        raise invalid("prompt", "`prompt` must not be empty")
    if all(isinstance(item, int) for item in prompt):
        return [list(prompt)], [None]
    if all(isinstance(item, str) for item in prompt):
        return [tokenizer.encode(text) for text in prompt], list(prompt)
    return [list(ids) for ids in prompt], [None] * len(prompt)


def echo_count(body: Any) -> float | None:
    """How many of each prompt's last tokens to echo; `echo` echoes them all (inf)."""
    if body.echo_last is not None:
        return int(check_range("echo_last", body.echo_last, 0, math.inf))
    return math.inf if body.echo else None


def stop_strings(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOP_STRINGS:
        raise invalid("stop", f"`stop` takes at most {MAX_STOP_STRINGS} strings; got {len(stops)}")
    if any(not s for s in stops):
        raise invalid("stop", "stop strings must not be empty")
    return tuple(stops)


def stop_token_ids(body: Any) -> list[int]:
    """Friendli's `stop_tokens` (token sequences, any of whose tokens stops) and `eos_token`."""
    ids = [token for sequence in body.stop_tokens or [] for token in sequence.tokens or []]
    return ids + list(body.eos_token or [])


def bad_word_tokens(body: Any, tokenizer) -> list[list[int]]:
    phrases = [tokenizer.encode(word, add_special_tokens=False) for word in body.bad_words or []]
    return phrases + [list(sequence.tokens or []) for sequence in body.bad_word_tokens or []]


def max_tokens_for(body: Any, prompt: list[int], max_model_len: int) -> int:
    """The output budget of one prompt, fitted to the context window."""
    requested = resolve_max_tokens({"max_tokens": body.max_tokens, "max_completion_tokens": body.max_completion_tokens})
    if body.max_total_tokens is not None:
        if requested is not None:
            raise invalid("max_total_tokens", "give `max_tokens` or `max_total_tokens`, not both")
        requested = body.max_total_tokens - len(prompt)
        if requested < 1:
            raise invalid("max_total_tokens", f"`max_total_tokens` ({body.max_total_tokens}) leaves no room "
                                              f"after the prompt's {len(prompt)} tokens")
    room = max_model_len - len(prompt)
    if room < 1:
        raise invalid("prompt", f"the prompt has {len(prompt)} tokens; the context window is {max_model_len}, "
                                f"so at most {max_model_len - 1} fit")
    requested = DEFAULT_MAX_TOKENS if requested is None else requested
    if requested > room and body.context_length_exceeded_behavior == "error":
        raise invalid("prompt", f"the prompt's {len(prompt)} tokens plus max_tokens {requested} exceed "
                                f"the context window of {max_model_len} tokens")
    return min(requested, room)


def base_sampling_fields(body: Any, tokenizer) -> dict[str, Any]:
    if body.min_tokens is not None and body.min_total_tokens is not None:
        raise invalid("min_total_tokens", "give `min_tokens` or `min_total_tokens`, not both")
    fields = {name: getattr(body, name) for name in PLAIN_SAMPLING_FIELDS}
    fields["stop_token_ids"] = stop_token_ids(body)
    fields["bad_word_tokens"] = bad_word_tokens(body, tokenizer)
    return fields


def choice_requests(body: Any, server: ServerState, prompts: list[list[int]], n: int,
                    echo_last: float | None, logprobs: int | None) -> list[ChoiceRequest]:
    """prompt index p, choice i -> choice index p * n + i, with the seed of choice i."""
    engine = server.running_engine.engine
    fields = base_sampling_fields(body, server.tokenizer)
    stops = stop_strings(body.stop)
    seeds = choice_seed_list(body.seed, n)
    choices = []
    for p, prompt in enumerate(prompts):
        max_tokens = max_tokens_for(body, prompt, engine.config.max_model_len)
        # Prompt logprobs serve the echo, and make a max_tokens 0 request a prefill.
        wants_prompt = (echo_last is not None and logprobs is not None) or max_tokens == 0
        params = sampling_params({**fields, "max_tokens": max_tokens, "logprobs": logprobs,
                                  "prompt_logprobs": (logprobs or 0) if wants_prompt else None},
                                 engine.model_config.vocab_size)
        choices += [ChoiceRequest(index=p * n + i, prompt_index=p, prompt_token_ids=prompt,
                                  sampling=replace(params, seed=seeds[i]), stops=stops) for i in range(n)]
    return choices
