"""The fused sampling step: logits [rows, vocab] to next tokens, one row of parameters each.

It runs inside the same jit as the forward pass. Every request value is a per-row array
and every choice a jnp.where or a lax.cond on "does any row use this", so a batch that
uses nothing beyond temperature costs about what greedy does. The order of operations:

    raw logits -> penalties -> logit bias -> allowed-token mask (bans, constraints, forcing)
      -> greedy pick (temperature 0)  |  / temperature -> top-k, top-p, min-p, typical, XTC
      -> Mirostat (rows that use it) -> one inverse-CDF draw per row
      -> logprobs of the pick under the model and under the processed distribution
      -> the pick's raw logit (always: one gather, cheaper than a branch)
      -> beam rows only: their candidates for the next beams (engine/sampling/beams.py),
         from the full path's truncated logits

Rows whose top-k, top-p or min-p cut keeps only tokens among their best NUM_CANDIDATES
(128) run the stages after the cut on those (the narrow path, engine/sampling/candidates.py);
the others on the whole row (the full path, `full_draw`). Both apply the same filter rules
(engine/sampling/filters.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.sampling.argmax import argmax
from engine.sampling.arrays import SamplingArrays
from engine.sampling.beams import BeamCandidates, candidates_for, is_beam_row, no_beam_candidates
from engine.sampling.candidates import narrow_draw
from engine.sampling.draw import Draw, inverse_cdf_draw, row_uniforms
from engine.sampling.filters import apply_truncation
from engine.sampling.logprobs import TokenLogprobs, empty_logprobs, model_logprobs, raw_logit, sampling_logprob_of
from engine.sampling.mirostat import mirostat_step
from engine.sampling.params import MAX_LOGPROBS
from engine.sampling.processors import processed_logits

NUM_TOP_LOGPROBS = MAX_LOGPROBS  # alternatives computed per sampled token when any row asks


@jax.tree_util.register_dataclass
@dataclass
class SampleResult:
    """What the sampling step returns for each row."""

    tokens: jax.Array  # [rows] i32
    logprobs: TokenLogprobs
    mirostat_mu: jax.Array  # [rows] f32, the state for the next step
    beams: BeamCandidates  # the next tokens each beam row proposes (engine/sampling/beams.py)


def full_draw(processed, scaled, arrays: SamplingArrays, uniforms, want_logprob: bool | jax.Array):
    """The full-vocabulary path for temperature-scaled logits [rows, vocab]: every filter,
    Mirostat and the draw over the whole row (the sampling logprob only if `want_logprob`),
    and the beam rows' candidates from the same truncated logits. Returns (Draw,
    BeamCandidates)."""
    truncated = apply_truncation(scaled, arrays.top_k, arrays.top_p, arrays.min_p, arrays.typical_p,
                                 arrays.xtc_threshold, arrays.xtc_probability, uniforms[:, 1])
    miro_tokens, mu, shaped = mirostat_step(truncated, arrays.mirostat_target, arrays.mirostat_lr,
                                            arrays.mirostat_mu, uniforms[:, 0])
    drawn = inverse_cdf_draw(shaped, uniforms[:, 0])
    tokens = jnp.where(arrays.mirostat_target > 0, miro_tokens, drawn)
    sampling_logprob = jax.lax.cond(want_logprob, lambda: sampling_logprob_of(shaped, tokens),
                                    lambda: jnp.zeros(tokens.shape, jnp.float32))
    draw = Draw(tokens=tokens, mirostat_mu=mu, sampling_logprob=sampling_logprob)
    return draw, candidates_for(processed, truncated, arrays)


def stochastic_draw(processed, arrays: SamplingArrays):
    """(Draw, BeamCandidates): tokens of the temperature rows, the narrow path where a row's
    cut allows it and the full-vocabulary path for the others (each run only when some row
    needs it), and the beam rows' candidates, which the full path computes."""
    stochastic = arrays.temperature > 0
    beam = is_beam_row(arrays)
    uniforms = row_uniforms(arrays.seeds, arrays.positions, 2)  # [draw, XTC coin]
    scaled = processed / jnp.where(stochastic, arrays.temperature, 1.0)[:, None]
    cuts = stochastic & ~beam & ((arrays.top_k > 0) | (arrays.top_p < 1) | (arrays.min_p > 0))
    narrow, narrowed = jax.lax.cond(
        jnp.any(cuts), lambda: narrow_draw(scaled, arrays, uniforms),
        lambda: (_no_draw(arrays), jnp.zeros_like(cuts)))
    narrowed = narrowed & cuts
    want_logprob = jnp.any(arrays.want_logprobs & stochastic & ~narrowed)
    full, beams = jax.lax.cond(jnp.any((stochastic & ~narrowed) | beam),
                               lambda: full_draw(processed, scaled, arrays, uniforms, want_logprob),
                               lambda: (narrow, no_beam_candidates(processed)))
    return jax.tree.map(lambda a, b: jnp.where(narrowed, a, b), narrow, full), beams


def _no_draw(arrays: SamplingArrays) -> Draw:
    zeros = jnp.zeros(arrays.temperature.shape, jnp.float32)
    return Draw(tokens=zeros.astype(jnp.int32), mirostat_mu=arrays.mirostat_mu, sampling_logprob=zeros)


def result_shape(arrays: SamplingArrays, vocab_size: int) -> SampleResult:
    """What `sample` returns for `arrays` (one row each), as shapes and dtypes, for a carry
    that must exist before the first sample (engine/device/runner.py's rounds).

    Every input and result has one row per leading index, so the sampler, a third of a
    bucket's tracing, is traced once for a single row, and that shape is kept for every
    bucket: the rows' count only lengthens the leading axis."""
    leaves, tree = jax.tree_util.tree_flatten(arrays)
    rows = leaves[0].shape[0]
    key = (tree, vocab_size, tuple((leaf.shape[1:], leaf.dtype) for leaf in leaves))
    one_row = _ONE_ROW_RESULTS.get(key)
    if one_row is None:
        def one_row_of(leaf):
            return jax.ShapeDtypeStruct((1, *leaf.shape[1:]), leaf.dtype)

        one_row = jax.eval_shape(lambda row: sample(jnp.zeros((1, vocab_size), jnp.float32), row),
                                 jax.tree_util.tree_map(one_row_of, arrays))
        _ONE_ROW_RESULTS[key] = one_row
    return jax.tree_util.tree_map(lambda leaf: jax.ShapeDtypeStruct((rows, *leaf.shape[1:]), leaf.dtype), one_row)


_ONE_ROW_RESULTS: dict = {}  # result_shape's single-row shapes, by the inputs' tree, shapes and dtypes


def sample(logits, arrays: SamplingArrays) -> SampleResult:
    """Next tokens for float32 logits [rows, vocab], with their logprobs and Mirostat state."""
    processed = processed_logits(logits, arrays)
    greedy = argmax(processed)
    stochastic = arrays.temperature > 0
    # Beam rows take the draw's full path too, whatever their temperature: their
    # candidates come from its truncated logits.
    draw, beams = jax.lax.cond(jnp.any(stochastic | is_beam_row(arrays)), lambda: stochastic_draw(processed, arrays),
                               lambda: (_no_draw(arrays), no_beam_candidates(processed)))
    tokens = jnp.where(stochastic, draw.tokens, greedy)
    mu = jnp.where(stochastic, draw.mirostat_mu, arrays.mirostat_mu)

    def logprobs():
        # A greedy row's token was picked from `processed` itself.
        greedy_logprob = jax.lax.cond(
            jnp.any(arrays.want_logprobs & ~stochastic), lambda: sampling_logprob_of(processed, tokens),
            lambda: draw.sampling_logprob)
        sampling_logprob = jnp.where(stochastic, draw.sampling_logprob, greedy_logprob)
        return model_logprobs(logits, tokens, sampling_logprob, num_top)

    num_top = min(NUM_TOP_LOGPROBS, logits.shape[-1])
    logprobs = jax.lax.cond(jnp.any(arrays.want_logprobs), logprobs,
                            lambda: empty_logprobs(tokens.shape[0], num_top))
    # Outside the branch: a row may want its logit without logprobs.
    logprobs = dataclasses.replace(logprobs, logit=raw_logit(logits, tokens))
    return SampleResult(tokens=tokens, logprobs=logprobs, mirostat_mu=mu, beams=beams)
