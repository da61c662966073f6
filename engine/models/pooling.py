"""Pooling token states into one vector a text, as a sentence-transformers checkpoint says.

The checkpoint's `modules.json` lists its stages: a Transformer (the encoder), a Pooling
(its mode in `<path>/config.json`: the mean of the text's tokens, the first token's state
(CLS), or the last token's, as decoder embedders such as Qwen3-Embedding pool), and
optionally Normalize (unit length). A stage or mode Flint does not run (Dense projections,
max or weighted-mean pooling, several modes concatenated) is refused by name: an embedding
pooled otherwise than the checkpoint says would be silently wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp

MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_lasttoken": "last"}
UNSUPPORTED_MODES = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                     "pooling_mode_weightedmean_tokens")
MODULE = "sentence_transformers.models."
KNOWN_STAGES = {MODULE + "Transformer", MODULE + "Pooling", MODULE + "Normalize"}


@dataclass(frozen=True)
class Pooling:
    mode: str  # "mean", "cls" or "last"
    normalize: bool


def sentence_transformers_pooling(modules: list[dict], read_json: Callable[[str], dict]) -> Pooling:
    """The pooling `modules` (modules.json) describe; `read_json(path)` reads a file of the
    checkpoint. ValueError naming a stage or mode that is not run."""
    for module in modules:
        if module["type"] not in KNOWN_STAGES:
            raise ValueError(f"sentence-transformers stage {module['type']!r} is not supported")
    pooling = [module for module in modules if module["type"] == MODULE + "Pooling"]
    if len(pooling) != 1:
        raise ValueError("a sentence-transformers checkpoint needs exactly one Pooling stage")
    config = read_json(f"{pooling[0]['path']}/config.json")
    unsupported = [key for key in UNSUPPORTED_MODES if config.get(key)]
    modes = [mode for key, mode in MODES.items() if config.get(key)]
    if unsupported or len(modes) != 1:
        raise ValueError(f"pooling {', '.join(unsupported) or modes or 'none'} is not supported: "
                         f"one of {', '.join(MODES)} alone")
    return Pooling(mode=modes[0], normalize=any(module["type"] == MODULE + "Normalize" for module in modules))


def pool(hidden: jax.Array, lengths: jax.Array, pooling: Pooling) -> jax.Array:
    """One vector a text, [texts, hidden], from its tokens' states [texts, tokens, hidden]."""
    if pooling.mode == "cls":
        pooled = hidden[:, 0]
    elif pooling.mode == "last":
        pooled = jnp.take_along_axis(hidden, (lengths - 1)[:, None, None], axis=1)[:, 0]
    else:
        present = (jnp.arange(hidden.shape[1])[None, :] < lengths[:, None])[..., None]
        pooled = jnp.where(present, hidden, 0.0).sum(1) / jnp.maximum(lengths, 1)[:, None]
    return unit_length(pooled) if pooling.normalize else pooled


def unit_length(vectors: jax.Array) -> jax.Array:
    """Each row over its length, as torch's F.normalize (a floor of 1e-12 under the length)."""
    return vectors / jnp.maximum(jnp.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
