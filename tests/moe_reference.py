"""An independent float64 NumPy forward of a mixture-of-experts decoder (Qwen3-MoE,
Mixtral), for reference checks: the Llama forward of tests/numpy_reference.py with each
layer's MLP replaced by experts, written from the models' definition, not from
engine/models/moe.py. Token by token, expert by expert: no grouping, no sorting.

Routing: a softmax over the router's logits, the top num_experts_per_tok (a tie goes to
the lower expert), their weights renormalized with norm_topk_prob."""

from __future__ import annotations

import numpy as np
from numpy_reference import forward as llama_forward


def silu(x):
    return x / (1 + np.exp(-x))


def routes(config, router, h, forced=None):
    """Each token's experts and weights, and the softmax they were picked from. `forced`:
    per token None (the router picks) or its k experts, weighted by the router's
    probabilities of them (routing replay), renormalized as a pick would be."""
    logits = h.astype(np.float64) @ router.T.astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    picks = np.argsort(-probs, axis=-1, kind="stable")[:, :config.num_experts_per_tok]
    for token, experts in enumerate(forced or []):
        if experts is not None:
            picks[token] = experts
    weights = np.take_along_axis(probs, picks, -1)
    if config.norm_topk_prob:
        weights /= weights.sum(-1, keepdims=True)
    return picks, weights


def experts(config, layers, i, h, forced=None, trace=None):
    """Layer i's experts MLP of the normed h; the picks go to trace[:, i] when given."""
    picks, weights = routes(config, layers["router"][i], h, forced)
    if trace is not None:
        trace[:, i] = picks
    out = np.zeros(h.shape, np.float64)
    for t in range(h.shape[0]):
        for expert, weight in zip(picks[t], weights[t]):
            gate = h[t] @ layers["we_gate"][i][expert].T
            up = h[t] @ layers["we_up"][i][expert].T
            out[t] += weight * ((silu(gate) * up) @ layers["we_down"][i][expert].T)
    return out.astype(np.float32)


def forward(config, params, token_ids):
    """Logits [seq, vocab] for every position of one sequence."""
    return llama_forward(config, params, token_ids, mlp=experts)


def routed_forward(config, params, token_ids, replay=()):
    """(logits [seq, vocab], routing [seq, layers, k]) of one sequence, with `replay`: per
    position from the first, None or its experts layer by layer (layers x k ids)."""
    k = config.num_experts_per_tok
    trace = np.zeros((len(token_ids), config.num_layers, k), np.int64)
    replay = list(replay) + [None] * (len(token_ids) - len(replay))

    def mlp(config, layers, i, h):
        forced = [None if routing is None else list(routing[i * k:(i + 1) * k]) for routing in replay]
        return experts(config, layers, i, h, forced, trace)

    return llama_forward(config, params, token_ids, mlp=mlp), trace


def greedy(config, params, prompt_ids, num_tokens):
    ids = list(prompt_ids)
    for _ in range(num_tokens):
        ids.append(int(np.argmax(forward(config, params, ids)[-1])))
    return ids[len(prompt_ids):]
