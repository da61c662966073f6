"""Mirostat v2 (Basu et al. 2021), per row, as llama.cpp's `mirostat_v2` sampler does it.

Each row keeps a state mu. A step drops every token whose surprise -log2(p) exceeds mu
(the most likely token always stays), renormalises, samples, then moves mu by the error
between the sampled token's surprise under the truncated distribution and the target tau:
mu <- mu - eta * (surprise - tau).

Log base: surprise, tau and mu are in bits (log2), as in the paper and llama.cpp, so a
request's `mirostat_target` means the same here as there. Logits are natural-log scale and
the truncated logits returned feed the natural-log `sampling_logprob`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from engine.sampling.argmax import argmax
from engine.sampling.logprobs import log_softmax
from engine.sampling.gather import take

_LN2 = math.log(2.0)


def initial_mu(tau):
    """The state before a row's first step: 2 * tau, as in the paper and llama.cpp."""
    return 2.0 * jnp.asarray(tau, jnp.float32)


def _truncate(logits, mu):
    """Logits with -inf where surprise exceeds mu [rows]; the top token is always kept."""
    surprise = -log_softmax(logits) / _LN2  # bits
    top = argmax(logits)
    is_top = jnp.arange(logits.shape[-1])[None, :] == top[:, None]
    keep = (surprise <= mu[:, None]) | is_top
    return jnp.where(keep, logits, -jnp.inf), top


def _draw(logprobs, uniform, fallback):
    """Inverse CDF at uniform [rows] in [0, 1): the first index whose CDF exceeds the draw.

    Using `cdf <= draw` (not `<`) means a zero-probability entry is never chosen, since its
    CDF equals its predecessor's; fallback covers float round-off at the very top."""
    cdf = jnp.cumsum(jnp.exp(logprobs), axis=-1)
    draw = uniform.astype(jnp.float32) * cdf[:, -1]
    token = jnp.minimum(jnp.sum(cdf <= draw[:, None], axis=-1), logprobs.shape[-1] - 1)
    chosen = take(logprobs, token)
    return jnp.where(jnp.isneginf(chosen), fallback, token).astype(jnp.int32)


def mirostat_step(logits, tau, eta, mu, uniform):
    """One Mirostat v2 step for every row.

    logits [rows, vocab] float: the distribution to sample (temperature already applied).
    tau [rows]: target surprise in bits, 0 = Mirostat off for that row. eta [rows]: learning
    rate. mu [rows]: state in bits (start from `initial_mu(tau)`). uniform [rows]: one draw in
    [0, 1) per row. Returns (tokens [rows] int32, new_mu [rows] float32, truncated_logits
    [rows, vocab]). Rows with tau == 0 keep mu and their logits, and their tokens are
    meaningless: the caller selects with jnp.where."""
    tau = jnp.asarray(tau, jnp.float32)
    eta = jnp.asarray(eta, jnp.float32)
    mu = jnp.asarray(mu, jnp.float32)
    active = tau > 0

    def run():
        truncated, top = _truncate(logits, mu)
        renormalised = log_softmax(truncated)
        tokens = _draw(renormalised, uniform, top)
        surprise = -take(renormalised, tokens) / _LN2
        new_mu = jnp.where(active, mu - eta * (surprise - tau), mu)
        return tokens, new_mu, jnp.where(active[:, None], truncated, logits)

    def skip():
        return jnp.zeros(logits.shape[:1], jnp.int32), mu, logits

    # A batch with no Mirostat row pays nothing for it.
    return jax.lax.cond(jnp.any(active), run, skip)
