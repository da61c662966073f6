"""The narrow path of the fused sampler: rows cut down to their best NUM_CANDIDATES tokens.

Most requests that shape their distribution use top_k, top_p or min_p, and those cuts
usually keep a few dozen tokens. Once a row's cut provably keeps only tokens among its
NUM_CANDIDATES best (engine/sampling/topk.py), every later stage (the other filters, the
draw, the sampling logprob) runs on [rows, NUM_CANDIDATES] instead of the whole
vocabulary, and gives the same result: the tokens outside are removed either way. The
cuts are the rules of engine/sampling/filters.py, read off the sorted candidates. Rows
where that can't be proven, and Mirostat rows, take the full-vocabulary path.

Which path a row takes depends only on that row's logits and parameters, so a seeded
request draws the same tokens whatever else shares its batch.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from engine.sampling.draw import Draw, inverse_cdf_draw
from engine.sampling.filters import apply_after_the_cuts, kth_best, min_p_keeps, nucleus_threshold
from engine.sampling.gather import take
from engine.sampling.logprobs import log_softmax
from engine.sampling.topk import top_k as best_of

# 128 covers Fireworks' whole top_k range (up to 100) and most nucleus cuts of a real model;
# finding them costs ~9 ms at 64 x 49,152 on the 2-core CPU, 256 would cost ~13 ms.
NUM_CANDIDATES = 128
_NEG_INF = -jnp.inf


class Narrowing(NamedTuple):
    """Per row [rows]: which cut keeps only candidates, and the thresholds of the cuts."""

    by_k: jax.Array  # bool: top_k does
    k_threshold: jax.Array  # f32: the k-th candidate (meaningful where by_k)
    by_p: jax.Array  # bool: top_p (on the whole row's mass) does
    p_threshold: jax.Array  # f32: top_p's threshold (meaningful where by_p)
    by_min_p: jax.Array  # bool: min_p does

    @property
    def narrowed(self):
        return self.by_k | self.by_p | self.by_min_p


def _whole_row_nucleus(values, scaled, top_p):
    """(threshold, covered) of top-p on the whole row, read off its sorted candidates:
    filters.nucleus_threshold with the row's total mass as the reference."""
    peak = jnp.max(values, axis=-1, keepdims=True)  # not a slice of top_k's output: see narrowing
    target = top_p * jnp.sum(jnp.exp(scaled - peak), axis=-1)  # the row's mass, top token = 1
    return nucleus_threshold(values, jnp.exp(values - peak), target)


def narrowing(values, scaled, top_k, top_p, min_p) -> Narrowing:
    """Which cut keeps only candidates, for candidates `values` [rows, n] sorted best first
    of the temperature-scaled logits `scaled` [rows, vocab].

    A cut qualifies when its threshold is strictly above the last candidate, so no token
    tied with it is left outside. top_p counts only when top_k is off (else it sees the
    top-k survivors), and is applied on the whole row's mass; min_p counts when neither
    of the others does (top_p, if on, then keeps every candidate)."""
    vocab = scaled.shape[-1]
    # Reductions, never slices, of top_k's values: XLA's CPU backend turns a top_k whose
    # output is sliced into a full sort of the row (~1 s at 64 x 49,152).
    last = jnp.min(values, axis=-1)
    k_on = (top_k > 0) & (top_k < vocab)
    k_threshold = kth_best(values, top_k)
    by_k = k_on & (top_k <= values.shape[-1]) & (k_threshold > last)
    p_on = ~k_on & (top_p < 1.0)

    def by_top_p():
        threshold, covered = _whole_row_nucleus(values, scaled, top_p)
        return threshold, p_on & covered & (threshold > last)

    p_threshold, by_p = jax.lax.cond(jnp.any(p_on), by_top_p,
                                     lambda: (jnp.zeros_like(last), jnp.zeros_like(p_on)))
    peak = jnp.max(values, axis=-1)
    # All-tied candidates can't be cut below the top (and exp(-inf - -inf) would be NaN).
    drops_last = (last < peak) & ~min_p_keeps(last, peak, min_p)
    by_min_p = ~k_on & ~by_p & (min_p > 0) & drops_last
    return Narrowing(by_k, k_threshold, by_p, p_threshold, by_min_p)


def _below(values, threshold, active):
    """values with -inf where an active row's value is below its threshold."""
    return jnp.where(active[:, None] & (values < threshold[:, None]), _NEG_INF, values)


def _nucleus_of_survivors(values, top_p, active):
    """top_p over the candidates' own mass (the rest already cut by top_k)."""
    probs = jnp.exp(values - jnp.max(values, axis=-1, keepdims=True))
    threshold, _ = nucleus_threshold(values, probs, top_p * jnp.sum(probs, axis=-1))
    return _below(values, threshold, active)


def shape_candidates(values, arrays, cuts: Narrowing, xtc_uniform):
    """The candidates' logits after every filter, -inf where removed (narrowed rows only).

    `values` are sorted best first, and the cuts of top_k and top_p keep them so."""
    values = _below(values, cuts.k_threshold, cuts.by_k)
    values = _nucleus_of_survivors(values, arrays.top_p, cuts.by_k & (arrays.top_p < 1.0))
    values = _below(values, cuts.p_threshold, cuts.by_p)
    return apply_after_the_cuts(values, arrays.min_p, arrays.typical_p, arrays.xtc_threshold, arrays.xtc_probability,
                                xtc_uniform)


def narrow_draw(scaled, arrays, uniforms) -> tuple[Draw, jax.Array]:
    """(Draw, narrowed [rows] bool) for temperature-scaled logits [rows, vocab] and the
    rows' uniforms [rows, 2] (the draw, the XTC coin).

    Rows that are not narrowed get meaningless results and must be taken from the full path."""
    values, ids = best_of(scaled, min(NUM_CANDIDATES, scaled.shape[-1]))
    cuts = narrowing(values, scaled, arrays.top_k, arrays.top_p, arrays.min_p)
    shaped = shape_candidates(values, arrays, cuts, uniforms[:, 1])
    positions = inverse_cdf_draw(shaped, uniforms[:, 0])
    draw = Draw(tokens=take(ids, positions).astype(jnp.int32), mirostat_mu=arrays.mirostat_mu,
                sampling_logprob=take(log_softmax(shaped), positions))
    # Mirostat rows take the full path: rare, and a second copy of Mirostat here would
    # cost every compiled bucket seconds of compile time.
    return draw, cuts.narrowed & (arrays.mirostat_target <= 0)
