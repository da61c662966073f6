"""An encoder (engine/models/bert.py) run on batches of bucketed shapes: every (texts, tokens)
shape is compiled by `warmup`, and a batch only ever calls one of those executables, so no
request compiles anything (a shape that was not compiled is an error, as for the decoder's
buckets, engine/device/runner.py).

A batch of any size is cut into the largest row bucket's chunks, its texts sorted by length
first so that each chunk pads to the shortest token bucket its longest text fits; the
results come back in the inputs' order. An embedder's result is each text's pooled vector
([texts, hidden]); a cross-encoder's, each pair's score ([texts]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from engine.models.bert import classify, encode, relevance
from engine.models.pooling import pool

if TYPE_CHECKING:
    from engine.loader.sentence_transformers import EncoderCheckpoint

ROW_BUCKETS = (1, 8, 32)
MIN_TOKENS = 16


@dataclass(frozen=True)
class EncoderInput:
    """One text's token ids (or a pair's, with `types` 1 on the second text's tokens)."""

    ids: list[int]
    types: list[int] | None = None


class InputTooLong(ValueError):
    """An input with more tokens than the model takes; `index` is its place in the batch."""

    def __init__(self, index: int, num_tokens: int, limit: int):
        super().__init__(f"input {index} has {num_tokens} tokens; the model takes at most {limit}")
        self.index, self.num_tokens, self.limit = index, num_tokens, limit


def token_buckets(max_tokens: int) -> tuple[int, ...]:
    """Powers of two from MIN_TOKENS, and `max_tokens` itself last."""
    buckets, size = [], MIN_TOKENS
    while size < max_tokens:
        buckets.append(size)
        size *= 2
    return (*buckets, max_tokens)


class EncoderRunner:
    def __init__(self, checkpoint: EncoderCheckpoint, row_buckets: tuple[int, ...] = ROW_BUCKETS):
        self.checkpoint = checkpoint
        self.row_buckets = tuple(sorted(row_buckets))
        self.token_buckets = token_buckets(checkpoint.max_tokens)
        self.weights = jax.device_put(checkpoint.weights)
        self.compiled: dict[tuple[int, int], jax.stages.Compiled] = {}

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return [(rows, tokens) for rows in self.row_buckets for tokens in self.token_buckets]

    def warmup(self) -> None:
        """Compile every (rows, tokens) bucket."""
        program = jax.jit(self._forward)
        for rows, tokens in self.shapes:
            matrix = jax.ShapeDtypeStruct((rows, tokens), jnp.int32)
            self.compiled[rows, tokens] = program.lower(
                self.weights, matrix, matrix, jax.ShapeDtypeStruct((rows,), jnp.int32)).compile()

    def _forward(self, weights, ids, types, lengths):
        checkpoint = self.checkpoint
        states = encode(weights, checkpoint.config, ids, types, lengths)
        if checkpoint.activation is not None:
            return relevance(classify(weights, states), checkpoint.activation)
        return pool(states, lengths, checkpoint.pooling)

    def run(self, inputs: list[EncoderInput]) -> np.ndarray:
        """Each input's vector (an embedder) or score (a cross-encoder), in order; InputTooLong
        for the first input past the model's limit."""
        for index, item in enumerate(inputs):
            if len(item.ids) > self.checkpoint.max_tokens:
                raise InputTooLong(index, len(item.ids), self.checkpoint.max_tokens)
        order = sorted(range(len(inputs)), key=lambda index: len(inputs[index].ids))
        results: list[np.ndarray | None] = [None] * len(inputs)
        largest = self.row_buckets[-1]
        for start in range(0, len(order), largest):
            chunk = order[start: start + largest]
            for index, result in zip(chunk, self._run_chunk([inputs[index] for index in chunk])):
                results[index] = result
        if not results:
            width = () if self.checkpoint.activation is not None else (self.checkpoint.config.hidden_size,)
            return np.zeros((0, *width), np.float32)
        return np.stack(results)

    def _run_chunk(self, chunk: list[EncoderInput]) -> np.ndarray:
        rows = next(bucket for bucket in self.row_buckets if bucket >= len(chunk))
        tokens = next(bucket for bucket in self.token_buckets if bucket >= max(len(item.ids) for item in chunk))
        ids, types = np.zeros((rows, tokens), np.int32), np.zeros((rows, tokens), np.int32)
        lengths = np.ones(rows, np.int32)  # padding rows: one token, so their softmax sees a key
        for row, item in enumerate(chunk):
            ids[row, : len(item.ids)] = item.ids
            if item.types is not None:
                types[row, : len(item.types)] = item.types
            lengths[row] = len(item.ids)
        compiled = self.compiled.get((rows, tokens))
        if compiled is None:
            raise RuntimeError(f"encoder bucket {(rows, tokens)} was not compiled: call warmup() first")
        return np.asarray(compiled(self.weights, ids, types, lengths))[: len(chunk)]

