"""Distribution-shaping filters: top-k, top-p, min-p, typical-p, XTC, one rule each.

Ties are resolved by threshold rules, never by position, so the kept set is a function of
the values alone:
- top_k keeps every token >= the k-th largest logit (all tokens tied with it survive);
- top_p / typical_p keep a token iff the probability mass of tokens ranked strictly
  better than it is < p (so a tie at the boundary is kept whole, and the best-ranked
  token is always kept);
- min_p keeps a token iff its probability is >= min_p times the top token's;
- XTC removes tokens with prob >= threshold whose prob is strictly above the least
  probable of them (all tokens tied with that least probable one survive).

The rank-based rules read their threshold off a row's best tokens sorted best first
(`kth_best`, `nucleus_threshold`); both sampling paths call them: the narrow path
(engine/sampling/candidates.py) on its candidates, the `apply_*` filters here on the row's
best NUM_FAST_CANDIDATES. No vocabulary sort: a full sort measured ~1 s at 64 x 49,152 on
the 2-core CPU. Where a threshold lies beyond the best tokens (large k, flat
distributions), the `apply_*` filters alone fall back to the exact bisection of
engine/sampling/bisection.py.

The `apply_*` filters take float32 logits [rows, n] (already temperature-scaled) and
per-row parameter arrays, and return logits with removed tokens set to -inf. Rows whose
parameter says "off" come back bit-exact, and a filter no row uses is skipped with
`lax.cond`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from engine.sampling.bisection import largest_key, ordered_keys
from engine.sampling.gather import IN_BOUNDS, take
from engine.sampling.topk import top_k as best_of

_NEG_INF = -jnp.inf
# The best 256 cost ~13 ms at 64 x 49,152 on the 2-core CPU, against ~100-150 ms for a
# bisection: peaked distributions settle within these and skip the bisection.
NUM_FAST_CANDIDATES = 256


def kth_best(best, top_k):
    """Top-k's threshold from scores [rows, n] sorted best first: the k-th of them (k
    clipped to [1, n]). Top-k keeps every token >= it; exact where top_k <= n."""
    return take(best, jnp.clip(top_k, 1, best.shape[-1]) - 1)


def nucleus_threshold(best, best_probs, target):
    """The mass rule's threshold from scores [rows, n] sorted best first and their
    (unnormalized) probabilities: (threshold [rows], covered [rows] bool).

    The threshold is the first score at which the mass so far reaches `target` [rows] (p
    times the row's total mass); the rule keeps scores >= it. Exact where `covered`: the n
    best hold that much mass. Where they don't, it is the last of them."""
    mass = jnp.cumsum(best_probs, axis=-1)
    cut = jnp.minimum(jnp.sum(mass < target[:, None], axis=-1), best.shape[-1] - 1)
    return take(best, cut), mass[:, -1] >= target


def min_p_keeps(logits, peak, min_p):
    """Min-p's rule: whether exp(logit - peak) >= min_p, peak being the row's top logit
    (its probability scaled to 1). Shapes broadcast: a token, a row or a column of them."""
    return jnp.exp(logits - peak) >= min_p


def unnormalized_probs(logits):
    """exp(logits - row max): the top token gets 1, -inf tokens get 0."""
    return jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))


def _fast_or_bisect(fast, covered, bisect, row_size: int):
    """Use the threshold read off the best tokens where it is exact; bisect only if some
    row needs it.

    When the best tokens are the whole row (rows of at most NUM_FAST_CANDIDATES, such as
    the narrow path's candidates) the fast answer is the answer: a row "not covered" there
    only lost the last bit of a sum, and its threshold is already the row's lowest score.
    Leaving the bisection out of those programs also saves compiling it."""
    if row_size <= NUM_FAST_CANDIDATES:
        return fast
    return jax.lax.cond(jnp.all(covered), lambda: fast, lambda: jnp.where(covered, fast, bisect()))


def keep_by_mass(scores, probs, p):
    """Mask of tokens whose strictly-better-scored mass is < p of the row's total mass.

    Equivalently: the largest score threshold t with mass(score >= t) >= p, keeping
    score >= t. p <= 0 keeps just the top-scored token(s)."""
    keys = ordered_keys(scores)
    target = p * jnp.sum(probs, axis=-1)  # compare unnormalized sums: no division rounding
    best, index = best_of(scores, min(NUM_FAST_CANDIDATES, scores.shape[-1]))
    fast, covered = nucleus_threshold(best, jnp.take_along_axis(probs, index, axis=-1, mode=IN_BOUNDS), target)

    def holds(t):
        return jnp.sum(jnp.where(keys >= t[:, None], probs, 0), axis=-1) >= target

    threshold = _fast_or_bisect(ordered_keys(fast), covered, lambda: largest_key(keys, holds),
                                scores.shape[-1])
    return keys >= threshold[:, None]


def _masked(logits, keep, active):
    """Set dropped tokens to -inf on active rows; inactive rows pass through untouched."""
    return jnp.where(active[:, None] & ~keep, _NEG_INF, logits)


def _skip_unless_used(active, filtered, logits):
    """Run filtered() only when some row uses the filter; otherwise return logits as is."""
    return jax.lax.cond(jnp.any(active), filtered, lambda: logits)


def apply_top_k(logits, top_k):
    """Keep each row's top_k largest logits (int32 [rows]; 0 or >= vocab = off).

    Every token tied with the k-th largest value is kept, so ties may keep more than k."""
    vocab = logits.shape[-1]
    active = (top_k > 0) & (top_k < vocab)

    def filtered():
        keys = ordered_keys(logits)
        k = jnp.clip(top_k, 1, vocab)
        best, _ = best_of(logits, min(NUM_FAST_CANDIDATES, vocab))
        covered = (k <= best.shape[-1]) | ~active
        counts_reach_k = lambda t: jnp.sum(keys >= t[:, None], axis=-1) >= k
        threshold = _fast_or_bisect(ordered_keys(kth_best(best, k)), covered,
                                    lambda: largest_key(keys, counts_reach_k), vocab)
        return _masked(logits, keys >= threshold[:, None], active)

    return _skip_unless_used(active, filtered, logits)


def apply_top_p(logits, top_p):
    """Nucleus filter (float32 [rows]; >= 1.0 = off): the smallest most-probable set whose
    mass reaches top_p, ties at the boundary kept whole; the top token always survives."""
    active = top_p < 1.0

    def filtered():
        keep = keep_by_mass(logits, unnormalized_probs(logits), top_p)
        return _masked(logits, keep, active)

    return _skip_unless_used(active, filtered, logits)


def apply_min_p(logits, min_p):
    """Keep tokens with prob >= min_p * (top token's prob) (float32 [rows]; <= 0 = off)."""
    active = min_p > 0

    def filtered():
        keep = min_p_keeps(logits, jnp.max(logits, axis=-1, keepdims=True), min_p[:, None])
        return _masked(logits, keep, active)

    return _skip_unless_used(active, filtered, logits)


def apply_typical_p(logits, typical_p):
    """Locally typical sampling (Meister et al.; HF TypicalLogitsWarper), float32 [rows],
    >= 1.0 = off. Tokens are ranked by |surprise - entropy| (closest first) and the
    smallest set in that order whose mass reaches typical_p is kept (at least one token)."""
    active = typical_p < 1.0

    def filtered():
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        probs = jnp.exp(log_probs)
        entropy = -jnp.sum(jnp.where(probs > 0, probs * log_probs, 0), axis=-1, keepdims=True)
        atypicality = jnp.abs(-log_probs - entropy)  # +inf for -inf logits
        keep = keep_by_mass(-atypicality, probs, typical_p)
        return _masked(logits, keep, active)

    return _skip_unless_used(active, filtered, logits)


def apply_xtc(logits, threshold, probability, uniform):
    """Exclude Top Choices (llama.cpp / text-generation-webui), per row float32 [rows].

    With probability `probability` (applied where uniform < probability; 0 = off), remove
    every token with prob >= threshold except the least probable of them (and any tied
    with it). With fewer than two such tokens nothing changes; threshold > 0.5 disables."""
    active = uniform < probability

    def filtered():
        probs = jax.nn.softmax(logits, axis=-1)
        top = probs >= threshold[:, None]
        least_top = jnp.min(jnp.where(top, probs, jnp.inf), axis=-1, keepdims=True)
        return _masked(logits, ~(top & (probs > least_top)), active)

    return _skip_unless_used(active, filtered, logits)


def apply_truncation(logits, top_k, top_p, min_p, typical_p, xtc_threshold, xtc_probability, xtc_uniform):
    """All filters in the order top_k, top_p, then `apply_after_the_cuts` (vLLM/llama.cpp-like).

    Each filter sees the logits left by the previous ones, so its probabilities are
    renormalized over the surviving tokens. A filter no row uses costs one `jnp.any`."""
    logits = apply_top_p(apply_top_k(logits, top_k), top_p)
    return apply_after_the_cuts(logits, min_p, typical_p, xtc_threshold, xtc_probability, xtc_uniform)


def apply_after_the_cuts(logits, min_p, typical_p, xtc_threshold, xtc_probability, xtc_uniform):
    """The filters after top-k and top-p, in their order: min_p, typical_p, XTC. Both
    sampling paths end with them (the narrow one on its candidates, engine/sampling/candidates.py)."""
    logits = apply_typical_p(apply_min_p(logits, min_p), typical_p)
    return apply_xtc(logits, xtc_threshold, xtc_probability, xtc_uniform)
