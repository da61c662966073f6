"""BatchInputs: the one pytree that crosses from host to device each step.

Tokens of every scheduled sequence (prefill chunks and decodes alike) are flattened into
one ragged row of `num_tokens` (a shape bucket); sequences are rows of the block table
(`num_seqs`, a bucket derived from it). Padding tokens point at the null page.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from engine.sampling.arrays import SamplingArrays, empty_sampling_arrays


@jax.tree_util.register_dataclass
@dataclass
class BatchInputs:
    token_ids: jax.Array  # [tokens] int32
    positions: jax.Array  # [tokens] int32, position of each token in its sequence
    token_rows: jax.Array  # [tokens] int32, the row (sequence) of each token; -1 for padding
    context_lens: jax.Array  # [tokens] int32, tokens of its sequence already in the cache
    next_token_ids: jax.Array  # [tokens] int32, the prompt token that follows; -1: no prompt logprob wanted
    block_tables: jax.Array  # [seqs, pages_per_seq] int32, 0 (the null page) past the end
    logits_indices: jax.Array  # [seqs] int32, the token whose logits each row samples from
    dense_rows: jax.Array  # [max_prefill_rows] int32, rows of several tokens when tokens > seqs; -1: none
    sampling: SamplingArrays  # one row of sampling parameters per sequence
    # Input embeddings replacing token embeddings (engine/host/embeddings.py): a few fixed rows, so
    # the shape stays static; the scheduler keeps a step's replacements within them.
    embedding_rows: jax.Array  # [embedding rows, hidden] float32
    embedding_token_index: jax.Array  # [embedding rows] int32, the token each row replaces; -1: none
    # Routing replay (engine/models/moe.py): each token's experts in every layer, replayed
    # instead of the router's pick; -1: the router picks. [tokens, 0, 0] without experts.
    forced_experts: jax.Array  # [tokens, layers, experts per token] int32
    # Each row's LoRA adapter slot (engine/device/lora.py); -1: the base model alone.
    row_adapters: jax.Array  # [seqs] int32

    @property
    def num_tokens(self) -> int:
        return self.token_ids.shape[0]


def empty_batch(num_tokens: int, num_seqs: int, pages_per_seq: int, vocab_size: int,
                history: int, max_prefill_rows: int = 1, hidden_size: int = 1,
                num_embedding_rows: int = 1, routing_shape: tuple[int, int] = (0, 0)) -> BatchInputs:
    """An all-padding batch of the given bucket (also the template for compiling it).

    `history` is the width of the token history the penalties read (max_model_len);
    `routing_shape` the model's (layers, experts per token) (ModelConfig.routing_shape)."""
    tokens = np.zeros(num_tokens, np.int32)
    embedding_rows = np.zeros((num_embedding_rows, hidden_size), np.float32)
    return BatchInputs(
        token_ids=tokens, positions=tokens.copy(), token_rows=np.full(num_tokens, -1, np.int32),
        context_lens=tokens.copy(), next_token_ids=np.full(num_tokens, -1, np.int32),
        block_tables=np.zeros((num_seqs, pages_per_seq), np.int32),
        logits_indices=np.zeros(num_seqs, np.int32), dense_rows=np.full(max_prefill_rows, -1, np.int32),
        sampling=empty_sampling_arrays(num_seqs, vocab_size, history),
        embedding_rows=embedding_rows, embedding_token_index=np.full(num_embedding_rows, -1, np.int32),
        forced_experts=np.full((num_tokens, *routing_shape), -1, np.int32),
        row_adapters=np.full(num_seqs, -1, np.int32),
    )


def pack_embeddings(batch: BatchInputs, replacements, offset: int) -> None:
    """Replacement embeddings (EmbeddingReplacement: position, values) into the host batch's
    next free embedding rows; position + `offset` is the token's index in the batch. The
    scheduler keeps a step within the rows (engine/host/embeddings.py)."""
    slot = int(np.count_nonzero(batch.embedding_token_index >= 0))
    if slot + len(replacements) > len(batch.embedding_token_index):
        raise ValueError(f"more replaced embeddings than the step's {len(batch.embedding_token_index)} rows")
    for replacement in replacements:
        batch.embedding_rows[slot] = replacement.values
        batch.embedding_token_index[slot] = replacement.position + offset
        slot += 1


def advance_decode(batch: BatchInputs, tokens, mirostat_mu) -> BatchInputs:
    """The next decode step's inputs, on the device: each row's one token is the one it just
    sampled, one position further (its cache slot follows from its block table).

    Valid when every real token is its row's only one (token i of row i), as in a step of
    decodes; padding stays padding. The penalties' history gains the sampled token at its
    position (the history holds a sequence's every token, max_model_len wide)."""
    real = batch.token_rows >= 0
    positions = jnp.where(real, batch.positions + 1, 0)
    sampling = batch.sampling
    history_ids = sampling.history_ids.at[jnp.arange(tokens.shape[0]), sampling.positions].set(tokens, mode="drop")
    return dataclasses.replace(
        batch,
        token_ids=jnp.where(real, tokens[jnp.maximum(batch.token_rows, 0)], 0),
        positions=positions,
        context_lens=jnp.where(real, batch.context_lens + 1, 0),
        next_token_ids=jnp.full_like(batch.next_token_ids, -1),
        embedding_token_index=jnp.full_like(batch.embedding_token_index, -1),  # only prompt tokens are replaced
        forced_experts=jnp.full_like(batch.forced_experts, -1),  # only prompt tokens are replayed
        sampling=dataclasses.replace(sampling, positions=sampling.positions + 1, mirostat_mu=mirostat_mu,
                                     history_ids=history_ids),
    )


def table_slots(block_tables, token_rows, positions, page_size: int):
    """Each token's cache slot (page * page_size + offset), read from its row's block table
    on the device (slot 0, in the null page, for padding): a batch advanced there, or given
    new tables for the next window, needs nothing else from the host."""
    rows = jnp.maximum(token_rows, 0)
    pages = jnp.take_along_axis(block_tables[rows], (positions // page_size)[:, None], axis=1, mode="clip")[:, 0]
    return jnp.where(token_rows >= 0, pages * page_size + positions % page_size, 0)
