"""Tiny random models over a real tokenizer's vocabulary, for fast engine and API tests."""

from __future__ import annotations

from engine.config import ModelConfig
from engine.loader.checkpoint import Checkpoint
from engine.loader.source import ModelSource
from engine.models.params import random_params


def tiny_checkpoint(vocab_size: int, seed: int = 0) -> Checkpoint:
    """A 2-layer random Llama over a real tokenizer's vocabulary, so text round-trips."""
    config = ModelConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_layers=2,
                         num_heads=4, num_kv_heads=2, head_dim=8, max_position_embeddings=512)
    source = ModelSource(id="tiny-random", path=None, format="hf", context_length=512)
    return Checkpoint(config, random_params(config, seed=seed), source)


