"""SamplingArrays: the sampling step's per-row arrays, laid out from params.py's declarations.

Every per-row parameter declared with `row(...)` on SamplingParams gets a [rows] array in
`SamplingArrays.rows`, with the dtype and padding its RowSpec names, and reads as an
attribute (`arrays.top_p`). Nothing here lists them again: a new parameter's row appears
with its declaration. The fields of SamplingArrays itself are what is not one request
value per row: id lists, the packed allowed-token mask, the token history, state carried
between steps, and where the row's randomness comes from.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from engine.sampling.masks import num_words
from engine.sampling.params import MAX_LOGIT_BIAS, declared_rows

ROW_SPECS = declared_rows()  # attribute -> RowSpec, in declaration order


@jax.tree_util.register_dataclass
@dataclass
class SamplingArrays:
    """One row per sequence of the batch: numpy arrays on the host (filled by
    engine/sampling/inputs.py), device arrays in the jitted step."""

    rows: dict[str, jax.Array]  # attribute -> [rows], one per entry of ROW_SPECS
    bias_ids: jax.Array  # [rows, MAX_LOGIT_BIAS] i32, -1 = padding
    bias_values: jax.Array  # [rows, MAX_LOGIT_BIAS] f32
    allowed_words: jax.Array  # [rows, ceil(vocab / 32)] i32 packed bits, -1 = all allowed
    history_ids: jax.Array  # [rows, history] i32 prompt then output ids, -1 = padding
    num_prompt_tokens: jax.Array  # [rows] i32, where the outputs start in history_ids
    mirostat_mu: jax.Array  # [rows] f32, the state carried from the previous step
    seeds: jax.Array  # [rows] u32
    positions: jax.Array  # [rows] i32, position of the token being sampled
    want_logprobs: jax.Array  # [rows] bool
    beam_mode: jax.Array  # [rows] i32, 0: not a beam row (engine/sampling/beams.py)


def _row_reader(name: str) -> property:
    # A property with no setter: `arrays.top_p = x` fails loudly instead of adding an
    # attribute the pytree would silently drop; write `arrays.top_p[:] = x` on the host.
    return property(lambda arrays: arrays.rows[name], doc=f"rows[{name!r}]: [rows] {ROW_SPECS[name].dtype.__name__}")


for _name in ROW_SPECS:
    setattr(SamplingArrays, _name, _row_reader(_name))


def empty_sampling_arrays(num_rows: int, vocab_size: int, history: int) -> SamplingArrays:
    """Neutral host arrays: every row padded (greedy, nothing shaped, penalised, biased or banned)."""
    def full(value, dtype, *shape):
        return np.full((num_rows, *shape), value, dtype)

    return SamplingArrays(
        rows={name: full(spec.pad, spec.dtype) for name, spec in ROW_SPECS.items()},
        bias_ids=full(-1, np.int32, MAX_LOGIT_BIAS), bias_values=full(0, np.float32, MAX_LOGIT_BIAS),
        allowed_words=full(-1, np.int32, num_words(vocab_size)), history_ids=full(-1, np.int32, history),
        num_prompt_tokens=full(0, np.int32), mirostat_mu=full(0, np.float32),
        seeds=full(0, np.uint32), positions=full(0, np.int32), want_logprobs=full(False, np.bool_),
        beam_mode=full(0, np.int32),
    )
