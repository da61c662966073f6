"""Beam candidates under jit: each beam row's best next tokens, for engine/host/beam_search.py.

A beam row does not draw its token: the host picks the next beams from every beam's
candidates together. The device gives each beam row its best BEAM_CANDIDATES tokens by a
key that depends on the search type (the row's `beam_mode`):

- DETERMINISTIC: the key is the token's logprob, log_softmax of the processed logits
  (penalties, biases and bans applied; no temperature, no truncation);
- NAIVE_SAMPLING (Hugging Face's beam_sample): the next beams are drawn without
  replacement, over every (beam, token), with probability proportional to
  exp((beam score + logprob) / temperature), each beam's tokens limited to what its
  top-k, top-p, min-p and typical-p keep. Drawing without replacement is taking the top
  keys after adding Gumbel noise (the Gumbel-top-k trick), so the row's key is
  logprob / temperature + Gumbel; the host adds beam score / temperature;
- STOCHASTIC (Kool et al. 2019): the key is the token's log probability under the row's
  sampling distribution (temperature and truncation applied) plus Gumbel noise; the host
  adds the beam's sampling log probability and conditions the sum on the beam's own
  perturbed score (engine/host/beam_search.py).

Every candidate carries its logprob, which the beam's score sums whatever the search type,
so that hypotheses of every type are ranked by the same score. The noise is a function of
the row's seed and position alone, as every draw is (engine/sampling/draw.py); the beams
of a search get distinct seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.host.request import BEAM_MODES
from engine.sampling.draw import row_uniforms
from engine.sampling.logprobs import log_softmax
from engine.sampling.gather import IN_BOUNDS
from engine.sampling.topk import top_k

BEAM_CANDIDATES = 64  # per beam row: at least twice the most beams a search may keep (31)
NOT_A_BEAM = 0
DETERMINISTIC, NAIVE_SAMPLING, STOCHASTIC = (BEAM_MODES[name] for name in ("DETERMINISTIC", "NAIVE_SAMPLING",
                                                                           "STOCHASTIC"))
_GUMBEL_STREAM = 1  # a row's noise is not its draw's uniforms (draw.py row_uniforms)


@jax.tree_util.register_dataclass
@dataclass
class BeamCandidates:
    """Each row's best next tokens by key, best first (zeros for rows that are no beam)."""

    token_ids: jax.Array  # [rows, candidates] i32
    logprobs: jax.Array  # [rows, candidates] f32, the score increment
    sampling_logprobs: jax.Array  # [rows, candidates] f32, under the row's sampling distribution
    keys: jax.Array  # [rows, candidates] f32, descending


def row_gumbels(seeds, positions, num: int):
    """Standard Gumbel noise [rows, num], a function of each row's seed and position."""
    return -jnp.log(-jnp.log(row_uniforms(seeds, positions, num, _GUMBEL_STREAM)))


def _perturbed(truncated, logprobs, arrays):
    """(keys, sampling logprobs) [rows, vocab] of the rows that draw their candidates, from
    their temperature-scaled logits after truncation (what `full_draw` draws from)."""
    temperature = jnp.where(arrays.temperature > 0, arrays.temperature, 1.0)[:, None]
    sampling_logprobs = log_softmax(truncated)
    gumbels = row_gumbels(arrays.seeds, arrays.positions, truncated.shape[-1])
    naive = jnp.where(jnp.isfinite(truncated), logprobs / temperature + gumbels, -jnp.inf)
    stochastic = sampling_logprobs + gumbels
    keys = jnp.where((arrays.beam_mode == STOCHASTIC)[:, None], stochastic, naive)
    return keys, sampling_logprobs


def beam_candidates(processed, truncated, arrays) -> BeamCandidates:
    """The candidates of every row from its processed logits [rows, vocab] (float32) and,
    for the rows that draw them, the same logits scaled and truncated."""
    logprobs = log_softmax(processed)
    drawn = arrays.beam_mode >= NAIVE_SAMPLING
    keys, sampling_logprobs = jax.lax.cond(jnp.any(drawn), lambda: _perturbed(truncated, logprobs, arrays),
                                           lambda: (logprobs, logprobs))
    keys = jnp.where(drawn[:, None], keys, logprobs)
    sampling_logprobs = jnp.where(drawn[:, None], sampling_logprobs, logprobs)
    best_keys, token_ids = top_k(keys, _num_candidates(processed))

    def take(values):
        return jnp.take_along_axis(values, token_ids, axis=-1, mode=IN_BOUNDS)

    return BeamCandidates(token_ids=token_ids, logprobs=take(logprobs), sampling_logprobs=take(sampling_logprobs),
                          keys=best_keys)


def no_beam_candidates(processed) -> BeamCandidates:
    """What a batch without beam rows returns instead of computing candidates."""
    zeros = jnp.zeros((processed.shape[0], _num_candidates(processed)), jnp.float32)
    return BeamCandidates(token_ids=zeros.astype(jnp.int32), logprobs=zeros, sampling_logprobs=zeros, keys=zeros)


def _num_candidates(processed) -> int:
    return min(BEAM_CANDIDATES, processed.shape[-1])


def candidates_for(processed, truncated, arrays) -> BeamCandidates:
    """Beam candidates when some row is a beam row; zeros, at the cost of one `any`, otherwise.

    Called by the full-vocabulary draw (engine/sampling/sampler.py), which every beam row
    takes: its truncated logits are the drawn searches' distribution, so the truncation
    filters, the largest part of the sampling program, are compiled once for both."""
    return jax.lax.cond(jnp.any(is_beam_row(arrays)), lambda: beam_candidates(processed, truncated, arrays),
                        lambda: no_beam_candidates(processed))


def is_beam_row(arrays):
    return arrays.beam_mode != NOT_A_BEAM
