"""Flash-decoding for the Mosaic GPU kernel (engine/device/attention/mosaic_gpu.py): how many
programs share each query tile's keys, and how their partial results combine.

A decode step of few sequences has few tiles: 16 programs for Llama-3-8B at batch 1, on
132 SMs. Sharing each tile's key blocks among several programs fills the GPU; each share
is a softmax over its own keys, and shares combine exactly by their log-sum-exps.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

# Programs a step should have before its keys are not split: two per SM of an H100 or
# H200 (132 SMs), so that one wave fills the GPU. In GPU interpret mode (tests, on the
# CPU) far fewer: every program is simulated, and two or three shares test the same code.
GPU_PROGRAMS_TO_FILL = 264
INTERPRET_PROGRAMS_TO_FILL = 24
MAX_KEY_SPLITS = 16


def key_splits(num_items: int, num_kv: int, interpret: bool) -> int:
    """Programs that share each tile's keys: as many as fill the GPU, 1 when tiles do."""
    to_fill = INTERPRET_PROGRAMS_TO_FILL if interpret else GPU_PROGRAMS_TO_FILL
    return max(1, min(MAX_KEY_SPLITS, to_fill // (num_items * num_kv)))


def combine_splits(partial, lse):
    """The attention output [kv, rows, d] from each share's [splits, kv, rows, d], each
    normalised over its own keys, and their log-sum-exps [splits, kv, rows]."""
    if partial.shape[0] == 1:
        return partial[0]
    peak = lse.max(axis=0)
    weights = jnp.exp(lse - jnp.where(jnp.isfinite(peak), peak, 0.0))  # shares without keys weigh 0
    total = weights.sum(axis=0)
    return (weights[..., None] * partial).sum(axis=0) / jnp.where(total > 0, total, 1.0)[..., None]


def key_block(page_size: int) -> int:
    """Keys a program folds in at a time: whole pages, and a multiple of 64 (wgmma's K for P V).
    Here rather than in mosaic_gpu.py, so that the start-up check's shapes need no import of
    Mosaic GPU (a third of a second at every start, GPU or not)."""
    return math.lcm(page_size, 64)
