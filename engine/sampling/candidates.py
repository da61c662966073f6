"""The narrow path of the fused sampler: rows cut down to their best NUM_CANDIDATES tokens.

Most requests that shape their distribution use top_k, top_p or min_p, and those cuts
usually keep a few dozen tokens. Once a row's cut provably keeps only tokens among its
NUM_CANDIDATES best (engine/topk.py), every later
stage (the other filters, the draw, the sampling logprob) runs on [rows, NUM_CANDIDATES]
instead of the whole vocabulary, and gives the same result: the tokens outside are
removed either way. Rows where that can't be proven, and Mirostat rows, take the
full-vocabulary path.

Which path a row takes depends only on that row's logits and parameters, so a seeded
request draws the same tokens whatever else shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.sampling.logprobs import log_softmax
from engine.sampling.topk import top_k
from engine.sampling.truncation import apply_min_p, apply_typical_p, apply_xtc

# 128 covers Fireworks' whole top_k range (up to 100) and most nucleus cuts of a real model;
# finding them costs ~9 ms at 64 x 49,152 on the 2-core CPU, 256 would cost ~13 ms.
NUM_CANDIDATES = 128
_NEG_INF = -jnp.inf


@jax.tree_util.register_dataclass
@dataclass
class Draw:
    """What a sampling path decides for each row."""

    tokens: jax.Array  # [rows] i32
    mirostat_mu: jax.Array  # [rows] f32, the state for the next step
    sampling_logprob: jax.Array  # [rows] f32, the token's logprob under the processed distribution


def _take(values, index):
    return jnp.take_along_axis(values, index[:, None], axis=-1)[:, 0]


def _top_p_cut(values, scaled, top_p):
    """(cut index, whether the cut lies among the candidates) for top-p on the whole row.

    The kept set is every token scoring >= values[cut], where cut is the first candidate
    at which the mass of the candidates so far reaches top_p of the row's total mass (the
    same rule as engine/truncation.py). Found only when the candidates hold that mass."""
    peak = jnp.max(values, axis=-1, keepdims=True)  # not a slice of top_k's output: see below
    total = jnp.sum(jnp.exp(scaled - peak), axis=-1)  # the row's mass, top token = 1
    mass = jnp.cumsum(jnp.exp(values - peak), axis=-1)
    target = top_p * total
    cut = jnp.minimum(jnp.sum(mass < target[:, None], axis=-1), values.shape[-1] - 1)
    return cut, mass[:, -1] >= target


def narrowing(values, scaled, top_k, top_p, min_p):
    """Per row: (by top_k, by top_p, by min_p) -- which cut keeps only candidates.

    A cut qualifies when its threshold is strictly above the last candidate, so no token
    tied with it is left outside. top_p counts only when top_k is off (else it sees the
    top-k survivors), and is applied on the whole row's mass; min_p counts when neither
    of the others does (top_p, if on, then keeps every candidate)."""
    vocab = scaled.shape[-1]
    num = values.shape[-1]
    # Reductions, never slices, of top_k's values: XLA's CPU backend turns a top_k whose
    # output is sliced into a full sort of the row (~1 s at 64 x 49,152).
    last = jnp.min(values, axis=-1)
    k_on = (top_k > 0) & (top_k < vocab)
    kth = _take(values, jnp.clip(top_k, 1, num) - 1)
    by_k = k_on & (top_k <= num) & (kth > last)
    p_on = ~k_on & (top_p < 1.0)

    def by_top_p():
        cut, covered = _top_p_cut(values, scaled, top_p)
        return cut, p_on & covered & (_take(values, cut) > last)

    cut, by_p = jax.lax.cond(jnp.any(p_on), by_top_p,
                             lambda: (jnp.zeros_like(top_k), jnp.zeros_like(p_on)))
    below_min_p = jnp.exp(last - jnp.max(values, axis=-1)) < min_p
    by_min_p = ~k_on & ~by_p & (min_p > 0) & below_min_p
    return by_k, by_p, cut, by_min_p


def _sorted_top_k(values, top_k, active):
    """top_k on candidates sorted best first: keep what scores >= the k-th (ties included)."""
    kth = _take(values, jnp.clip(top_k, 1, values.shape[-1]) - 1)
    return jnp.where(active[:, None] & (values < kth[:, None]), _NEG_INF, values)


def _sorted_top_p(values, top_p, active):
    """top_p on candidates sorted best first, over their own mass (the rest already cut):
    engine/truncation.py's rule without its partial sort, which sorted input makes moot."""
    probs = jnp.exp(values - jnp.max(values, axis=-1, keepdims=True))
    target = top_p * jnp.sum(probs, axis=-1)
    cut = jnp.minimum(jnp.sum(jnp.cumsum(probs, axis=-1) < target[:, None], axis=-1), values.shape[-1] - 1)
    return jnp.where(active[:, None] & (values < _take(values, cut)[:, None]), _NEG_INF, values)


def shape_candidates(values, arrays, by_k, by_p, cut, xtc_uniform):
    """The candidates' logits after every filter, -inf where removed (narrowed rows only).

    `values` are sorted best first, and the cuts of top_k and top_p keep them so."""
    values = _sorted_top_k(values, arrays.top_k, by_k)
    values = _sorted_top_p(values, arrays.top_p, by_k & (arrays.top_p < 1.0))  # the top-k survivors' mass
    values = jnp.where(by_p[:, None] & (values < _take(values, cut)[:, None]), _NEG_INF, values)
    values = apply_min_p(values, arrays.min_p)
    values = apply_typical_p(values, arrays.typical_p)
    return apply_xtc(values, arrays.xtc_threshold, arrays.xtc_probability, xtc_uniform)


def narrow_draw(scaled, arrays, uniforms, draw_fn):
    """(Draw, narrowed [rows] bool) for temperature-scaled logits [rows, vocab].

    `draw_fn(logits, uniform)` picks a position per row by inverse CDF; rows that are not
    narrowed get meaningless results and must be taken from the full path."""
    values, ids = top_k(scaled, min(NUM_CANDIDATES, scaled.shape[-1]))
    by_k, by_p, cut, by_min_p = narrowing(values, scaled, arrays.top_k, arrays.top_p, arrays.min_p)
    shaped = shape_candidates(values, arrays, by_k, by_p, cut, uniforms[:, 1])
    positions = draw_fn(shaped, uniforms[:, 0])
    sampling_logprob = _take(log_softmax(shaped), positions)
    draw = Draw(tokens=_take(ids, positions).astype(jnp.int32), mirostat_mu=arrays.mirostat_mu,
                sampling_logprob=sampling_logprob)
    # Mirostat rows take the full path: rare, and a second copy of Mirostat here would
    # cost every compiled bucket seconds of compile time.
    return draw, (by_k | by_p | by_min_p) & (arrays.mirostat_target <= 0)
