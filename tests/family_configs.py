"""Tiny configs of the families beyond the plain Llama (engine/models/), shared by the
engine's reference tests and the HTTP tests: small enough to check against a NumPy forward,
with each family's features switched on."""

from __future__ import annotations

from engine.config import LINEAR, ModelConfig, RopeScaling

SHAPE = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_heads=4, num_kv_heads=2, head_dim=8,
             rms_norm_eps=1e-6, max_position_embeddings=512, bos_token_id=1, eos_token_ids=(2,))
FAMILIES = {
    # Soft-caps small enough to bend random weights' scores; a query scalar that is not head_dim.
    "gemma2": ModelConfig(**SHAPE, num_layers=4, family="gemma2", tie_word_embeddings=True,
                          layer_windows=(6, 0, 6, 0), attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
                          query_pre_attn_scalar=12.0),
    "gemma3": ModelConfig(**SHAPE, num_layers=6, family="gemma3", tie_word_embeddings=True, qk_norm=True,
                          layer_windows=(5, 5, 5, 5, 5, 0), rope_theta=1e6, rope_local_theta=10000.0,
                          rope_scaling=RopeScaling(4.0, kind=LINEAR), query_pre_attn_scalar=12.0),
    "mistral": ModelConfig(**SHAPE, num_layers=2, family="mistral", layer_windows=(6, 6)),
}

# Mixtures of experts: 8 experts, 2 per token. Mixtral's intermediate_size is its experts'.
MOE = {
    "qwen3_moe": ModelConfig(**{**SHAPE, "head_dim": 16}, num_layers=2, family="qwen3_moe", qk_norm=True,
                             rope_theta=1e6, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24),
    "mixtral": ModelConfig(**{**SHAPE, "intermediate_size": 24}, num_layers=2, family="mixtral",
                           num_experts=8, num_experts_per_tok=2, moe_intermediate_size=24),
}
