"""The weights pytree every loader produces and the model consumes (the Llama family's;
another family declares its own specs in its module, engine/models/).

Layout (every projection is stored [out, in], PyTorch's layout, and applied as x @ W.T;
layers are stacked on a leading axis so the forward can `lax.scan` over them). [out, in]
is also the fast one on XLA's CPU backend: a single-token step becomes a matrix-vector
product over contiguous rows, about three times faster than over [in, out].

    embed        [vocab, hidden]
    lm_head      [vocab, hidden]           absent when the embedding is tied
    final_norm   [hidden]
    rope_freq_factors [head_dim // 2]      optional: divisors of RoPE's inverse frequencies,
                                           as GGUF files of Llama 3.1 carry them (rope_freqs)
    layers/
      attn_norm  [layers, hidden]
      wq         [layers, heads * head_dim, hidden]
      wk, wv     [layers, kv_heads * head_dim, hidden]
      wo         [layers, hidden, heads * head_dim]
      bq         [layers, heads * head_dim]       only with attention_bias (Qwen2)
      bk, bv     [layers, kv_heads * head_dim]    only with attention_bias
      q_norm     [layers, head_dim]               only with qk_norm (Qwen3)
      k_norm     [layers, head_dim]               only with qk_norm
      mlp_norm   [layers, hidden]
      w_gate     [layers, intermediate, hidden]
      w_up       [layers, intermediate, hidden]
      w_down     [layers, hidden, intermediate]

Q and K use the Hugging Face head layout: heads are contiguous, and RoPE rotates the first
half of each head against the second half. GGUF files store Q and K permuted for
llama.cpp's interleaved RoPE; the GGUF loader undoes that.

Each entry also names its logical axes, which engine/device/sharding.py maps onto a device mesh.
"""

from __future__ import annotations

import numpy as np

from engine.config import ModelConfig
from engine.models import family_of
from engine.models.family import ParamSpec


def param_specs(config: ModelConfig) -> dict:
    """The shape and logical axes of every weight of `config`, in its family's layout."""
    return family_of(config).param_specs(config)


def random_params(config: ModelConfig, seed: int = 0) -> dict:
    """Random float32 weights in the layout above, as NumPy arrays (for tests and benchmarks).

    Projections are scaled by 1/sqrt(fan_in) so activations keep unit scale through the
    layers; norm weights are drawn around 1 so that they matter without blowing anything up.
    """
    rng = np.random.default_rng(seed)

    def draw(name: str, spec: ParamSpec) -> np.ndarray:
        return scale_draw(name, rng.standard_normal(spec.shape)).astype(np.float32)

    specs = param_specs(config)
    params = {name: draw(name, spec) for name, spec in specs.items() if name != "layers"}
    params["layers"] = {name: draw(name, spec) for name, spec in specs["layers"].items()}
    return params


def scale_draw(name: str, values):
    """Standard normal `values` (NumPy or jax) scaled as `random_params` describes."""
    if name.endswith("norm"):
        return 1.0 + 0.1 * values
    if name in ("bq", "bk", "bv"):
        return 0.1 * values
    if name != "embed":
        return values / np.sqrt(values.shape[-1])  # fan-in: weights are [out, in]
    return values


def random_device_params(config: ModelConfig, dtype: str, shardings: dict, seed: int = 0) -> dict:
    """Random weights like `random_params`, drawn on the devices by jax.random inside jit and
    laid out by `shardings` (engine/device/sharding.py `param_shardings` of `param_specs(config)`).

    For benchmarks of real model sizes: an 8B model's 16 GB of bfloat16 would take minutes
    to draw in host NumPy, and twice that in float32 before the cast. One jit per weight
    keeps the peak at one weight's float32 draw beyond the weights themselves."""
    import jax

    specs = param_specs(config)
    names = [name for name in specs if name != "layers"]
    keys = iter(jax.random.split(jax.random.key(seed), len(names) + len(specs["layers"])))

    def draw(name: str, spec: ParamSpec, sharding):
        normal = lambda key: scale_draw(name, jax.random.normal(key, spec.shape)).astype(dtype)  # noqa: E731
        return jax.jit(normal, out_shardings=sharding)(next(keys))

    params = {name: draw(name, specs[name], shardings[name]) for name in names}
    params["layers"] = {name: draw(name, spec, shardings["layers"][name]) for name, spec in specs["layers"].items()}
    return params


def check_params(config: ModelConfig, params: dict) -> None:
    """Raise ValueError naming the first weight whose presence or shape is wrong."""
    specs = param_specs(config)
    expected = {**{k: v for k, v in specs.items() if k != "layers"},
                **{f"layers/{k}": v for k, v in specs["layers"].items()}}
    actual = {**{k: v for k, v in params.items() if k != "layers"},
              **{f"layers/{k}": v for k, v in params.get("layers", {}).items()}}
    if "rope_freq_factors" in actual:
        expected["rope_freq_factors"] = ParamSpec((config.head_dim // 2,), (None,))
    for name in sorted(expected.keys() | actual.keys()):
        if name not in actual:
            raise ValueError(f"checkpoint lacks weight {name}")
        if name not in expected:
            raise ValueError(f"checkpoint has unexpected weight {name}")
        if tuple(actual[name].shape) != expected[name].shape:
            raise ValueError(f"weight {name} has shape {tuple(actual[name].shape)}, expected {expected[name].shape}")
