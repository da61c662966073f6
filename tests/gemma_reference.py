"""An independent float32 NumPy forward of Gemma 2 and Gemma 3 (text), for reference checks.

Written from the architecture's definition (Gemma 2 and 3 papers and their configs), not
from engine/models/gemma.py: the whole sequence at once, no cache, no paging, no batching.
The ModelConfig fields it reads are the config's meaning: `layer_windows` (per layer, the
latest keys seen; 0 all), the soft-caps, `query_pre_attn_scalar`, `rope_local_theta`.
"""

from __future__ import annotations

import numpy as np
from numpy_reference import rotate


def norm(x, weight, eps):
    """Gemma's RMSNorm: the weight is an offset from one."""
    variance = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
    return ((x / np.sqrt(variance + eps)) * (1.0 + weight.astype(np.float64))).astype(np.float32)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def cap(x, limit):
    return x if limit is None else limit * np.tanh(x / limit)


def inverse_frequencies(head_dim, theta, linear_factor=1.0):
    return 1.0 / theta ** (np.arange(head_dim // 2, dtype=np.float64) * 2 / head_dim) / linear_factor


def attention(q, k, v, scale, window, softcap):
    """Causal grouped-query attention; a query at position i sees keys j with i - j < window."""
    seq, heads, _ = q.shape
    group = heads // k.shape[1]
    i, j = np.arange(seq)[:, None], np.arange(seq)[None, :]
    visible = (j <= i) & ((i - j < window) if window else True)
    out = np.zeros_like(q)
    for h in range(heads):
        scores = cap(q[:, h] @ k[:, h // group].T * scale, softcap)
        scores = np.where(visible, scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out[:, h] = (weights / weights.sum(axis=-1, keepdims=True)) @ v[:, h // group]
    return out


def layer_frequencies(config, layer):
    """Local layers of Gemma 3 rotate with their own base, unscaled; the others with rope_theta
    and the config's linear scaling."""
    if config.layer_windows and config.layer_windows[layer] and config.rope_local_theta:
        return inverse_frequencies(config.head_dim, config.rope_local_theta)
    factor = config.rope_scaling.factor if config.rope_scaling is not None else 1.0
    return inverse_frequencies(config.head_dim, config.rope_theta, factor)


def forward(config, params, token_ids):
    """Logits [seq, vocab] for every position of one sequence."""
    c, layers = config, params["layers"]
    seq, positions = len(token_ids), np.arange(len(token_ids), dtype=np.float64)
    x = params["embed"][np.asarray(token_ids)].astype(np.float32) * np.float32(np.sqrt(c.hidden_size))
    scale = (c.query_pre_attn_scalar or c.head_dim) ** -0.5
    for i in range(c.num_layers):
        h = norm(x, layers["attn_norm"][i], c.rms_norm_eps)
        q = (h @ layers["wq"][i].T).reshape(seq, c.num_heads, c.head_dim)
        k = (h @ layers["wk"][i].T).reshape(seq, c.num_kv_heads, c.head_dim)
        v = (h @ layers["wv"][i].T).reshape(seq, c.num_kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = norm(q, layers["q_norm"][i], c.rms_norm_eps), norm(k, layers["k_norm"][i], c.rms_norm_eps)
        inv_freq = layer_frequencies(c, i)
        q, k = rotate(q, positions, inv_freq), rotate(k, positions, inv_freq)
        window = c.layer_windows[i] if c.layer_windows else 0
        attended = attention(q, k, v, scale, window, c.attn_logit_softcapping).reshape(seq, -1)
        x = x + norm(attended @ layers["wo"][i].T, layers["post_attn_norm"][i], c.rms_norm_eps)
        h = norm(x, layers["mlp_norm"][i], c.rms_norm_eps)
        mlp = (gelu_tanh(h @ layers["w_gate"][i].T) * (h @ layers["w_up"][i].T)) @ layers["w_down"][i].T
        x = x + norm(mlp, layers["post_mlp_norm"][i], c.rms_norm_eps)
    x = norm(x, params["final_norm"], c.rms_norm_eps)
    head = params["lm_head"] if "lm_head" in params else params["embed"]
    return cap(x @ head.T, c.final_logit_softcapping)


def greedy(config, params, prompt_ids, num_tokens):
    ids = list(prompt_ids)
    for _ in range(num_tokens):
        ids.append(int(np.argmax(forward(config, params, ids)[-1])))
    return ids[len(prompt_ids):]
