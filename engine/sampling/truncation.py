"""Distribution-shaping filters for the fused sampler: top-k, top-p, min-p, typical-p, XTC.

Every filter takes float32 logits [rows, vocab] (already temperature-scaled) and per-row
parameter arrays, and returns logits with removed tokens set to -inf. Rows whose parameter
says "off" come back bit-exact, and a filter no row uses is skipped with `lax.cond`.

Ties are resolved by threshold rules, never by position, so the kept set is a function of
the values alone:
- top_k keeps every token >= the k-th largest logit (all tokens tied with it survive);
- top_p / typical_p keep a token iff the probability mass of tokens ranked strictly
  better than it is < p (so a tie at the boundary is kept whole, and the best-ranked
  token is always kept);
- XTC removes tokens with prob >= threshold whose prob is strictly above the least
  probable of them (all tokens tied with that least probable one survive).

No vocabulary sort (a full sort measured ~1 s at 64 x 49152 on the 2-core CPU). The
rank-based filters first read their threshold off the row's best 256 tokens
(engine/topk.py, ~13 ms), which is exact whenever the threshold lies among them. Rows
where it does not (large k, flat distributions) bisect over the float32 bit patterns mapped to
order-preserving uint32 keys: 32 halvings of the row's [min, max] key range land exactly
on a key that occurs in the row, so the result equals the sort-based definition, not an
approximation of it (~100-150 ms, each step one fused compare-and-reduce).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from engine.sampling.topk import top_k

_NEG_INF = -jnp.inf
_BISECTION_STEPS = 32  # key ranges are < 2**32 wide, so 32 halvings are exact
# The best 256 cost ~13 ms at 64 x 49152 on the 2-core CPU, against ~100-150 ms for
# a bisection: peaked distributions settle within these and skip the bisection.
_CANDIDATES = 256


def _ordered_keys(x):
    """Order-preserving uint32 image of float32 x: a < b iff key(a) < key(b) (no NaNs)."""
    x = jnp.where(x == 0, jnp.float32(0), x)  # -0.0 and +0.0 compare equal; give them one key
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    negative = (bits >> 31) == 1
    return jnp.where(negative, ~bits, bits | jnp.uint32(0x80000000))


def _largest_key(keys, holds):
    """Per row, the largest key t in [min, max] of the row with holds(t) true.

    holds(t) -> bool [rows] must be monotone (true up to some point, false beyond) and is
    assumed true at the row minimum, which is the fallback answer."""
    lo, hi = keys.min(axis=-1), keys.max(axis=-1)

    def halve(_, bounds):
        lo, hi = bounds
        span = hi - lo  # unsigned, never wraps since lo <= hi
        mid = lo + (span >> 1) + (span & 1)  # upper middle, so the loop always progresses
        ok = holds(mid) | (mid <= lo)  # when converged keep lo (its truth is the invariant)
        return jnp.where(ok, mid, lo), jnp.where(ok, hi, mid - 1)

    lo, _ = jax.lax.fori_loop(0, _BISECTION_STEPS, halve, (lo, hi))
    return lo


def _unnormalized_probs(logits):
    """exp(logits - row max): the top token gets 1, -inf tokens get 0."""
    return jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))


def _candidates(scores, count):
    """The row's `count` best scores, descending, and their indices (a partial sort)."""
    return top_k(scores, min(count, scores.shape[-1]))


def _fast_or_bisect(fast, covered, bisect, row_size: int):
    """Use the candidate answer where it is exact; bisect only if some row needs it.

    When the candidates are the whole row (rows of at most _CANDIDATES tokens, such as the
    sampler's narrow path) the candidate answer is the answer: a row "not covered" there
    only lost the last bit of a sum, and its threshold is already the row's lowest score.
    Leaving the bisection out of those programs also saves compiling it."""
    if row_size <= _CANDIDATES:
        return fast
    return jax.lax.cond(jnp.all(covered), lambda: fast, lambda: jnp.where(covered, fast, bisect()))


def _keep_by_mass(scores, probs, p):
    """Mask of tokens whose strictly-better-scored mass is < p of the row's total mass.

    Equivalently: the largest score threshold t with mass(score >= t) >= p, keeping
    score >= t. p <= 0 keeps just the top-scored token(s). The answer is read off the
    best _CANDIDATES tokens when their mass reaches p (exact then: the threshold is one
    of them), else found by bisection."""
    keys = _ordered_keys(scores)
    target = p * jnp.sum(probs, axis=-1)  # compare unnormalized sums: no division rounding
    best, index = _candidates(scores, _CANDIDATES)
    mass = jnp.cumsum(jnp.take_along_axis(probs, index, axis=-1), axis=-1)
    last = jnp.minimum(jnp.sum(mass < target[:, None], axis=-1), best.shape[-1] - 1)
    fast = _ordered_keys(jnp.take_along_axis(best, last[:, None], axis=-1)[:, 0])

    def holds(t):
        return jnp.sum(jnp.where(keys >= t[:, None], probs, 0), axis=-1) >= target

    threshold = _fast_or_bisect(fast, mass[:, -1] >= target, lambda: _largest_key(keys, holds),
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
        keys = _ordered_keys(logits)
        k = jnp.clip(top_k, 1, vocab)
        best, _ = _candidates(logits, _CANDIDATES)
        fast = _ordered_keys(jnp.take_along_axis(best, jnp.minimum(k, best.shape[-1])[:, None] - 1, axis=-1)[:, 0])
        covered = (k <= best.shape[-1]) | ~active
        counts_reach_k = lambda t: jnp.sum(keys >= t[:, None], axis=-1) >= k
        threshold = _fast_or_bisect(fast, covered, lambda: _largest_key(keys, counts_reach_k), vocab)
        return _masked(logits, keys >= threshold[:, None], active)

    return _skip_unless_used(active, filtered, logits)


def apply_top_p(logits, top_p):
    """Nucleus filter (float32 [rows]; >= 1.0 = off): the smallest most-probable set whose
    mass reaches top_p, ties at the boundary kept whole; the top token always survives."""
    active = top_p < 1.0

    def filtered():
        keep = _keep_by_mass(logits, _unnormalized_probs(logits), top_p)
        return _masked(logits, keep, active)

    return _skip_unless_used(active, filtered, logits)


def apply_min_p(logits, min_p):
    """Keep tokens with prob >= min_p * (top token's prob) (float32 [rows]; <= 0 = off)."""
    active = min_p > 0

    def filtered():
        keep = _unnormalized_probs(logits) >= min_p[:, None]  # top token's prob scaled to 1
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
        keep = _keep_by_mass(-atypicality, probs, typical_p)
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
    """All filters in the order top_k, top_p, min_p, typical_p, XTC (vLLM/llama.cpp-like).

    Each filter sees the logits left by the previous ones, so its probabilities are
    renormalized over the surviving tokens. A filter no row uses costs one `jnp.any`."""
    logits = apply_top_k(logits, top_k)
    logits = apply_top_p(logits, top_p)
    logits = apply_min_p(logits, min_p)
    logits = apply_typical_p(logits, typical_p)
    return apply_xtc(logits, xtc_threshold, xtc_probability, xtc_uniform)
