"""A decoder family (engine/models/) run as an encoder: an embedder pooling its last token
(Qwen3-Embedding, gte-Qwen2) or a reranker reading its yes/no logits (Qwen3-Reranker).

The family's own forward pass runs, stage for stage as it generates, over a padded batch of
texts [rows, tokens] flattened into one ragged batch, with two things swapped out:
- the KV cache for `NoCache`: a text is read in one call, so nothing is written or kept;
- the paged attention for `row_attention`: each row's tokens attend causally to the tokens
  before them in the same row (the family's window and soft-capping kept), [rows, tokens,
  tokens] per head rather than every token of the batch against every other.
Padding sits after each text's tokens, so causality alone keeps it out of every real token's
state; the pooling and the head read each text's last real token.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from engine.config import SCAN, ModelConfig
from engine.device.attention.reference import NEG_INF
from engine.device.batch import empty_batch
from engine.device.weights import serving_weights
from engine.models import family_of
from engine.models.decoder import Decoder
from engine.models.pooling import Pooling, pool

EncoderForward = Callable[[dict, jax.Array, jax.Array, jax.Array], jax.Array]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class NoCache:
    """The KV cache's interface with nothing behind it (engine/device/kv_cache.py): writes
    are dropped, and `row_attention` reads only the step's own keys. `page_size` spans a
    whole row, so every token's slot falls in its row's one (unused) page."""

    page_size: int = dataclasses.field(metadata={"static": True})

    def write(self, layer, pages, offsets, k, v) -> NoCache:
        return self

    def operands(self, layer):
        return None, None, layer


def row_attention(q, k, v, k_cache, v_cache, layer, batch, scale: float, window=None, softcap=None):
    """Causal attention within each row of a [rows, tokens] batch (rows: the batch's block
    tables), under the paged attention's signature (engine/device/attention); [t, heads, d]."""
    num_tokens, num_heads, head_dim = q.shape
    rows, num_kv = batch.block_tables.shape[0], k.shape[1]
    tokens, group = num_tokens // rows, num_heads // num_kv
    q = (q * scale).reshape(rows, tokens, num_kv, group, head_dim)
    k, v = k.reshape(rows, tokens, num_kv, head_dim), v.reshape(rows, tokens, num_kv, head_dim)
    scores = jnp.einsum("rqkgd,rskd->rkgqs", q, k)
    if softcap is not None:
        scores = softcap * jnp.tanh(scores / softcap)
    positions = jnp.arange(tokens)
    seen = positions[None, :] <= positions[:, None]  # [queries, keys]
    if window is not None:
        seen &= positions[None, :] > positions[:, None] - window
    weights = jax.nn.softmax(jnp.where(seen, scores, NEG_INF), axis=-1)
    return jnp.einsum("rkgqs,rskd->rqkgd", weights, v).reshape(num_tokens, num_heads, head_dim)


def decoder_states(model: Decoder, config: ModelConfig, ids: jax.Array) -> jax.Array:
    """The final (normed) hidden states [rows, tokens, hidden] of the texts `ids` [rows, tokens]."""
    rows, tokens = ids.shape
    batch = empty_batch(rows * tokens, rows, 1, vocab_size=1, history=1, hidden_size=config.hidden_size,
                        routing_shape=config.routing_shape)
    batch = dataclasses.replace(jax.tree.map(jnp.asarray, batch), token_ids=ids.reshape(-1), positions=jnp.tile(jnp.arange(tokens), rows),
                                token_rows=jnp.repeat(jnp.arange(rows), tokens))
    hidden, _, _ = model.hidden_states(NoCache(page_size=tokens), batch)
    return hidden.reshape(rows, tokens, -1)


def last_states(states: jax.Array, lengths: jax.Array) -> jax.Array:
    """Each text's last real token's state, [rows, hidden]."""
    return jnp.take_along_axis(states, (lengths - 1)[:, None, None], axis=1)[:, 0]


@dataclass(frozen=True)
class YesNoHead:
    """A reranker that answers with a token: its score is the probability of `yes_id` against
    `no_id` at the last token, the softmax over those two logits."""

    no_id: int
    yes_id: int


def decoder_encoder(config: ModelConfig, params: dict, pooling: Pooling | None = None,
                    head: YesNoHead | None = None) -> tuple[EncoderForward, dict]:
    """The forward (weights, ids, types, lengths) -> vectors or scores of a decoder checkpoint
    (`params`, engine/models/params.py) as an embedder (`pooling`) or a yes/no reranker
    (`head`), and the served weights it takes; float32, the layers under one scan."""
    weights = serving_weights(config, params, "float32")
    decoder, state = family_of(config).decoder(config, weights, row_attention, SCAN).split()

    def forward(state: dict, ids: jax.Array, types: jax.Array, lengths: jax.Array) -> jax.Array:
        model = decoder.bound(state)
        states = decoder_states(model, config, ids)
        if pooling is not None:
            return pool(states, lengths, pooling)
        logits = model.logits(last_states(states, lengths))
        return jax.nn.sigmoid(logits[:, head.yes_id] - logits[:, head.no_id])

    return forward, state
