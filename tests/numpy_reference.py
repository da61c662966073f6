"""An independent float32 NumPy forward (weights stored [out, in], as PyTorch stores them) of a Llama-family model, for reference checks.

Written from the architecture's definition (not from engine/models/llama.py): full causal
attention over the whole sequence, no cache, no paging, no batching.
"""

from __future__ import annotations

import numpy as np

from engine.device.native.ops import PackedWeight, unpacked


def rms_norm(x, weight, eps):
    variance = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
    return (x / np.sqrt(variance + eps)).astype(np.float32) * weight


def inverse_frequencies(config, freq_factors=None):
    half = config.head_dim // 2
    inv_freq = 1.0 / config.rope_theta ** (np.arange(half, dtype=np.float64) * 2 / config.head_dim)
    scaling = config.rope_scaling
    if scaling is not None:
        scaled = []
        for f in inv_freq:
            wavelength = 2 * np.pi / f
            low_wavelength = scaling.original_max_position_embeddings / scaling.low_freq_factor
            high_wavelength = scaling.original_max_position_embeddings / scaling.high_freq_factor
            if wavelength < high_wavelength:
                scaled.append(f)
            elif wavelength > low_wavelength:
                scaled.append(f / scaling.factor)
            else:
                smooth = (scaling.original_max_position_embeddings / wavelength - scaling.low_freq_factor) / (
                    scaling.high_freq_factor - scaling.low_freq_factor)
                scaled.append((1 - smooth) * f / scaling.factor + smooth * f)
        inv_freq = np.array(scaled)
    if freq_factors is not None:
        inv_freq = inv_freq / freq_factors
    return inv_freq


def rotate(x, positions, inv_freq):
    """x: [seq, heads, d]; pairs (i, i + d/2) rotate by position * inv_freq[i]."""
    angle = positions[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return np.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1).astype(np.float32)


def attention(q, k, v, window=0):
    """q: [seq, heads, d], k/v: [seq, kv_heads, d]; causal, grouped-query. With a `window`,
    a query at position i sees only keys j with i - j < window (Mistral's sliding window)."""
    seq, heads, d = q.shape
    group = heads // k.shape[1]
    out = np.zeros_like(q)
    causal = np.tril(np.ones((seq, seq), dtype=bool))
    if window:
        causal &= np.triu(np.ones((seq, seq), dtype=bool), -(window - 1))
    for h in range(heads):
        scores = q[:, h, :] @ k[:, h // group, :].T / np.sqrt(d)
        scores = np.where(causal, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        out[:, h, :] = weights @ v[:, h // group, :]
    return out


def dense_mlp(config, layers, i, h):
    """SwiGLU: silu(gate) * up, then down."""
    gate = h @ layers["w_gate"][i].T
    return ((gate / (1 + np.exp(-gate))) * (h @ layers["w_up"][i].T)) @ layers["w_down"][i].T


def forward(config, params, token_ids, mlp=dense_mlp):
    """Logits [seq, vocab] for every position of one sequence; `mlp(config, layers, i, h)`
    is layer i's MLP of the normed h."""
    head = params["lm_head"] if "lm_head" in params else params["embed"]
    return final_hidden(config, params, token_ids, mlp) @ head.T


def final_hidden(config, params, token_ids, mlp=dense_mlp):
    """The final norm's output [seq, hidden] at every position of one sequence."""
    layers = params["layers"]
    positions = np.arange(len(token_ids), dtype=np.float64)
    inv_freq = inverse_frequencies(config, params.get("rope_freq_factors"))
    x = params["embed"][np.asarray(token_ids)].astype(np.float32)
    seq = len(token_ids)
    for i in range(config.num_layers):
        h = rms_norm(x, layers["attn_norm"][i], config.rms_norm_eps)
        q, k, v = h @ layers["wq"][i].T, h @ layers["wk"][i].T, h @ layers["wv"][i].T
        if config.attention_bias:
            q, k, v = q + layers["bq"][i], k + layers["bk"][i], v + layers["bv"][i]
        q = q.reshape(seq, config.num_heads, config.head_dim)
        k = k.reshape(seq, config.num_kv_heads, config.head_dim)
        v = v.reshape(seq, config.num_kv_heads, config.head_dim)
        if config.qk_norm:
            q = rms_norm(q, layers["q_norm"][i], config.rms_norm_eps)
            k = rms_norm(k, layers["k_norm"][i], config.rms_norm_eps)
        q, k = rotate(q, positions, inv_freq), rotate(k, positions, inv_freq)
        window = config.layer_windows[i] if config.layer_windows else 0
        x = x + attention(q, k, v, window).reshape(seq, -1) @ layers["wo"][i].T
        x = x + mlp(config, layers, i, rms_norm(x, layers["mlp_norm"][i], config.rms_norm_eps))
    return rms_norm(x, params["final_norm"], config.rms_norm_eps)


def greedy(config, params, prompt_ids, num_tokens):
    """Greedy continuation, recomputing the whole sequence each step."""
    ids = list(prompt_ids)
    for _ in range(num_tokens):
        ids.append(int(np.argmax(forward(config, params, ids)[-1])))
    return ids[len(prompt_ids):]


def served_head(runner, params: dict) -> dict:
    """`params` with the embedding and head as `runner` serves them: rounded to int8 with
    a scale per group of inputs where it keeps them so (int8 layers under the native CPU
    kernels, engine/models/llama.py)."""
    embed = runner.state["embed"]
    if not hasattr(embed, "scales"):
        return params
    if isinstance(embed, PackedWeight):  # as the native kernels read it
        embed = unpacked(embed)
    group = embed.values.shape[-1] // embed.scales.shape[-1]
    return {name: int8_rounded(np.asarray(value, np.float32), group) if name in ("embed", "lm_head") else value
            for name, value in params.items()}


def int8_rounded(matrix, group: int):
    """`matrix` [..., width] as symmetric int8 per `group` inputs would hold it: each group's
    largest magnitude maps to 127, the rest round to the nearest step."""
    groups = matrix.reshape(*matrix.shape[:-1], -1, group)
    steps = np.abs(groups).max(axis=-1, keepdims=True) / np.float32(127)
    safe = np.where(steps > 0, steps, np.float32(1))
    return (np.clip(np.round(groups / safe), -127, 127) * steps).astype(np.float32).reshape(matrix.shape)
