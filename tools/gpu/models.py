"""Random-weight models for the GPU check (tools/gpu/parity.py, tools/gpu/bench.py).

The model shapes the check runs, a mesh on a chosen platform, a word-level tokenizer over
any vocabulary (the engine detokenizes every token it samples, and a random model's ids
need no real text), and an Engine over weights already in memory. Nothing here reads a
checkpoint from disk: the GPU machines have no network and carry no model files.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

from engine.config import EngineConfig, ModelConfig
from engine.device.sharding import TENSOR_AXIS
from engine.engine import Engine
from engine.loader.checkpoint import Checkpoint
from engine.loader.source import ModelSource
from engine.text.tokenizer import Tokenizer

# Llama 3 8B: hidden 4096, MLP 14336, 32 layers, 32 query and 8 KV heads of 128, 128256 ids.
LLAMA3_8B = ModelConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_layers=32,
                        num_heads=32, num_kv_heads=8, head_dim=128, rope_theta=500000.0,
                        max_position_embeddings=8192)
# Llama-shaped and small; head_dim 64 and GQA groups of 2 are a shape the GPU kernel serves.
TINY = ModelConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2,
                   num_heads=4, num_kv_heads=2, head_dim=64, max_position_embeddings=2048)
SHAPES = {"llama3-8b": LLAMA3_8B, "tiny": TINY}


def platform_mesh(platform: str | None = None) -> Mesh:
    """A one-device tensor-parallel mesh on `platform` ("cpu", "gpu"; None: the default backend).

    The engine's make_mesh takes jax.devices(), the default backend's: a CPU run on a GPU
    machine needs its mesh given."""
    return Mesh(np.array(jax.devices(platform)[:1]), (TENSOR_AXIS,))


def word_tokenizer(vocab_size: int) -> Tokenizer:
    """A word-level tokenizer with one token per id ("t0", "t1", ...), ids 0 and 1 special."""
    import tokenizers
    from tokenizers.decoders import ByteLevel
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {f"t{index}": index for index in range(vocab_size)}
    inner = tokenizers.Tokenizer(WordLevel(vocab, unk_token="t0"))
    inner.pre_tokenizer = WhitespaceSplit()
    inner.decoder = ByteLevel()  # llguidance (the engine's grammars) reads token bytes through it
    return Tokenizer(inner, bos_token_id=0, eos_token_ids=[1])


def random_engine(config: ModelConfig, engine_config: EngineConfig, params: dict, mesh: Mesh | None = None,
                  tokenizer: Tokenizer | None = None) -> Engine:
    """An Engine over `params` (host or device arrays), not yet compiled."""
    source = ModelSource(id=f"random-{config.hidden_size}x{config.num_layers}", path=None, format="hf",
                         context_length=engine_config.max_model_len)
    checkpoint = Checkpoint(config, params, source)
    return Engine(checkpoint, tokenizer or word_tokenizer(config.vocab_size), engine_config, mesh)


def served_bytes(engine: Engine) -> int:
    """Bytes of the weights a one-token step reads: all of them but the embedding, of which
    it gathers a row (unless the embedding is also the output head)."""
    state = jax.tree_util.tree_leaves(engine.runner.state)
    total = sum(leaf.size * leaf.dtype.itemsize for leaf in state if hasattr(leaf, "dtype"))
    if engine.model_config.tie_word_embeddings:
        return total
    embed = engine.runner.state["embed"]
    return total - embed.size * embed.dtype.itemsize


def kv_bytes_per_token(config: ModelConfig, dtype: str) -> int:
    """Bytes of K and V one cached token holds across every layer."""
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * jax.numpy.dtype(dtype).itemsize
