"""Log probabilities for the fused sampler and for prompt scoring, per row, under jit.

Two distributions matter for a sampled token (the Fireworks fields):
- `logprob`: under the model's raw logits, before any request processing. This is also
  the distribution `top_logprobs` ranks (OpenAI semantics) and the one `rank` counts in.
- `sampling_logprob`: under the processed distribution the token was actually drawn from
  (after penalties, temperature, truncation); masked entries are -inf there.
The sampled token's raw logit (Friendli's `include_output_logits`) comes with them: the
model's own score, before any processing, so it does not depend on the request's settings.

All log probabilities are natural logs, computed in float32. `num_top` is static: it is
the top-logprobs bucket (up to 20), and rows that asked for fewer are sliced on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.sampling.argmax import argmax
from engine.sampling.gather import take
from engine.sampling.topk import top_k


@jax.tree_util.register_dataclass
@dataclass
class TokenLogprobs:
    """Log probabilities of the sampled token of each row."""

    logprob: jax.Array  # [rows] float32, under the model's raw logits
    sampling_logprob: jax.Array  # [rows] float32, under the processed distribution; -inf if masked
    rank: jax.Array  # [rows] int32, 1 = most likely under the model distribution
    top_ids: jax.Array  # [rows, num_top] int32, most likely first
    top_logprobs: jax.Array  # [rows, num_top] float32, matching top_ids
    logit: jax.Array  # [rows] float32, the token's raw model logit (filled for every row: one gather)
    # The experts of the forward that gave the row's logits (engine/device/runner.py adds it
    # for a model with experts): [rows, layers, experts per token] int32; None without.
    routing: jax.Array | None = None


@jax.tree_util.register_dataclass
@dataclass
class PromptLogprobs:
    """Log probabilities of each prompt token given its prefix (echo, lm-eval loglikelihood)."""

    logprob: jax.Array  # [tokens] float32, log p(next token | prefix)
    is_greedy: jax.Array  # [tokens] bool, the next token is the argmax (lm-eval's is_greedy)
    rank: jax.Array  # [tokens] int32, 1 = most likely
    top_ids: jax.Array  # [tokens, num_top] int32, most likely first
    top_logprobs: jax.Array  # [tokens, num_top] float32, matching top_ids
    # The experts of each token's own forward, which gave the next token's logprob:
    # [tokens, layers, experts per token] int32 for a model with experts; None without.
    routing: jax.Array | None = None


def log_softmax(logits):
    """Float32 log softmax over the last axis that tolerates -inf entries.

    Masked (-inf) entries stay -inf; a fully masked row gives all -inf rather than NaN
    (jax.nn.log_softmax computes -inf - -inf there)."""
    logits = logits.astype(jnp.float32)
    peak = jnp.max(logits, axis=-1, keepdims=True)
    shifted = logits - jnp.where(jnp.isfinite(peak), peak, 0.0)
    log_total = jnp.log(jnp.sum(jnp.exp(shifted), axis=-1, keepdims=True))
    return jnp.where(jnp.isneginf(log_total), -jnp.inf, shifted - log_total)


def _model_logprobs(logits, token_ids, num_top: int):
    """(logprob, rank, top_ids, top_logprobs) of token_ids under the model distribution.

    Read off the raw logits and their log-normalizer rather than a materialized
    log_softmax: one pass less over [rows, vocab]."""
    logits = logits.astype(jnp.float32)
    peak = jnp.max(logits, axis=-1)
    log_total = peak + jnp.log(jnp.sum(jnp.exp(logits - peak[:, None]), axis=-1))
    chosen_logit = take(logits, token_ids)
    # Counting strictly greater entries makes ties share the better rank.
    rank = jnp.sum(logits > chosen_logit[:, None], axis=-1).astype(jnp.int32) + 1
    top_logits, top_ids = top_k(logits, num_top)
    return (chosen_logit - log_total, rank, top_ids.astype(jnp.int32),
            top_logits - log_total[:, None])


def raw_logit(model_logits, tokens):
    """Each row's token's logit [rows] under the model's raw logits [rows, vocab]."""
    return take(model_logits.astype(jnp.float32), tokens)


def sampling_logprob_of(sampling_logits, tokens):
    """Each row's token's logprob under processed logits [rows, vocab] (-inf if masked)."""
    return take(log_softmax(sampling_logits), tokens)


def model_logprobs(model_logits, tokens, sampling_logprob, num_top: int) -> TokenLogprobs:
    """TokenLogprobs of `tokens` [rows] under the model's raw logits [rows, vocab], with the
    sampling logprob [rows] the sampler computed on its own (possibly narrowed) distribution."""
    logprob, rank, top_ids, top_logprobs = _model_logprobs(model_logits, tokens, num_top)
    return TokenLogprobs(logprob=logprob, sampling_logprob=sampling_logprob, rank=rank,
                         top_ids=top_ids, top_logprobs=top_logprobs, logit=raw_logit(model_logits, tokens))


def token_logprobs(model_logits, sampling_logits, tokens, num_top: int) -> TokenLogprobs:
    """Log probabilities of the sampled `tokens` [rows].

    model_logits [rows, vocab]: the model's raw logits. sampling_logits [rows, vocab]: the
    processed logits the token was drawn from (-inf where masked). num_top: static count of
    top alternatives under the model distribution, in descending order."""
    return model_logprobs(model_logits, tokens, sampling_logprob_of(sampling_logits, tokens), num_top)


def prompt_logprobs(logits, next_token_ids, num_top: int) -> PromptLogprobs:
    """Log probability of each prompt token given what precedes it.

    logits [tokens, vocab]: the model's logits at each prompt position. next_token_ids
    [tokens]: the token that actually follows each position. num_top: static count of top
    alternatives, in descending order. The caller drops padding positions."""
    logprob, rank, top_ids, top_logprobs = _model_logprobs(logits, next_token_ids, num_top)
    # lm-eval compares with the argmax (first index on ties), so do the same.
    is_greedy = argmax(logits) == next_token_ids
    return PromptLogprobs(logprob=logprob, is_greedy=is_greedy, rank=rank,
                          top_ids=top_ids, top_logprobs=top_logprobs)


def empty_logprobs(num_rows: int, num_top: int) -> TokenLogprobs:
    """What a batch in which no row asked for logprobs returns instead of computing them."""
    zeros = jnp.zeros(num_rows, jnp.float32)
    return TokenLogprobs(
        logprob=zeros, sampling_logprob=zeros, rank=jnp.zeros(num_rows, jnp.int32),
        top_ids=jnp.zeros((num_rows, num_top), jnp.int32),
        top_logprobs=jnp.zeros((num_rows, num_top), jnp.float32), logit=zeros,
    )


def empty_prompt_logprobs(num_tokens: int, num_top: int) -> PromptLogprobs:
    """What a step in which no row asked for prompt logprobs returns instead of computing them."""
    zeros = jnp.zeros(num_tokens, jnp.float32)
    return PromptLogprobs(
        logprob=zeros, is_greedy=jnp.zeros(num_tokens, bool), rank=jnp.zeros(num_tokens, jnp.int32),
        top_ids=jnp.zeros((num_tokens, num_top), jnp.int32),
        top_logprobs=jnp.zeros((num_tokens, num_top), jnp.float32),
    )
