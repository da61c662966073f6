"""An encoder (engine/models/bert.py, or a decoder run as one, decoder_encoder.py; the
checkpoint's `forward`) run on batches of bucketed shapes: every (texts, tokens)
shape is compiled by `warmup`, and a batch only ever calls one of those executables, so no
request compiles anything (a shape that was not compiled is an error, as for the decoder's
buckets, engine/device/runner.py).

A batch of any size is cut into calls of its texts sorted by length, each call the row
bucket that pads least for the texts it takes (`_chunks`) and the shortest token bucket its
longest text fits; the results come back in the inputs' order. An embedder's result is each text's
pooled vector ([texts, hidden]); a reranker's, each pair's score ([texts]).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from engine.loader.encoder_checkpoint import EncoderCheckpoint

ROW_BUCKETS = (1, 8, 32)
MIN_TOKENS = 16
# A call's fixed cost, in padded tokens' worth (a dispatch and a copy back, ~1 ms on a CPU,
# against ~0.2 ms a token-row of all-MiniLM-L6-v2): more rows a call must save at least this.
CALL_COST = 64
# The most padded tokens one call takes (rows x tokens): a long token bucket is compiled for
# fewer rows, down to one (a decoder's texts reach 2,048 tokens, engine/loader/decoder_encoder.py).
MAX_CALL_TOKENS = 32 * 256


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


def check_lengths(inputs: list[EncoderInput], limit: int) -> None:
    """InputTooLong for the first of `inputs` past `limit` tokens."""
    for index, item in enumerate(inputs):
        if len(item.ids) > limit:
            raise InputTooLong(index, len(item.ids), limit)


def token_buckets(max_tokens: int) -> tuple[int, ...]:
    """16, 32 and 64, then steps of 32 to 256 and of a quarter past it (to a multiple of 64),
    and `max_tokens` itself last: past 64 tokens a text pads by at most a third, past 128 by
    at most a quarter (a sentence of 144 tokens computes 160, not 192: a sixth less)."""
    buckets, size = [], MIN_TOKENS
    while size < max_tokens:
        buckets.append(size)
        size = size * 2 if size < 64 else size + 32 if size < 256 else -(-(size * 5 // 4) // 64) * 64
    return (*buckets, max_tokens)


class EncoderRunner:
    def __init__(self, checkpoint: EncoderCheckpoint, row_buckets: tuple[int, ...] = ROW_BUCKETS):
        self.checkpoint = checkpoint
        self.row_buckets = tuple(sorted(row_buckets))
        # Past the shortest input: a reranker's prompt fills the small buckets on its own.
        shortest = checkpoint.shortest_input
        self.token_buckets = tuple(bucket for bucket in token_buckets(checkpoint.max_tokens) if bucket >= shortest)
        if not self.token_buckets:
            raise ValueError(f"{checkpoint.id}: its prompt alone has {shortest} tokens, past its limit of "
                             f"{checkpoint.max_tokens}")
        self.weights = jax.device_put(checkpoint.weights)
        self.compiled: dict[tuple[int, int], jax.stages.Compiled] = {}

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return [(rows, tokens) for rows in self.row_buckets for tokens in self.token_buckets
                if self.fits(rows, tokens)]

    def fits(self, rows: int, tokens: int) -> bool:
        return rows == self.row_buckets[0] or rows * tokens <= MAX_CALL_TOKENS

    def warmup(self) -> None:
        """Compile every (rows, tokens) bucket."""
        program = jax.jit(self.checkpoint.forward)
        for rows, tokens in self.shapes:
            matrix = jax.ShapeDtypeStruct((rows, tokens), jnp.int32)
            self.compiled[rows, tokens] = program.lower(
                self.weights, matrix, matrix, jax.ShapeDtypeStruct((rows,), jnp.int32)).compile()

    def run(self, inputs: list[EncoderInput]) -> np.ndarray:
        """Each input's vector (an embedder) or score (a cross-encoder), in order; InputTooLong
        for the first input past the model's limit."""
        check_lengths(inputs, self.checkpoint.max_tokens)
        order = sorted(range(len(inputs)), key=lambda index: len(inputs[index].ids))
        results: list[np.ndarray | None] = [None] * len(inputs)
        for chunk in self._chunks([len(inputs[index].ids) for index in order]):
            indices = order[chunk]
            for index, result in zip(indices, self._run_chunk([inputs[index] for index in indices])):
                results[index] = result
        if not results:
            width = () if self.checkpoint.task == "rerank" else (self.checkpoint.config.hidden_size,)
            return np.zeros((0, *width), np.float32)
        return np.stack(results)

    def _chunks(self, lengths: list[int]) -> list[slice]:
        """Sorted inputs (their `lengths`, ascending) cut into calls: from the shortest left,
        each call takes the row bucket whose padded shape costs least per input it serves
        (rows x tokens, plus CALL_COST for the call; a shape past MAX_CALL_TOKENS is not
        compiled), so short and long texts do not pad to
        one shape and a few long ones do not drag a whole chunk to their bucket."""
        chunks, start = [], 0
        while start < len(lengths):
            def cost(rows: int) -> float:
                taken = min(rows, len(lengths) - start)
                tokens = self.bucket_for(lengths[start + taken - 1])
                return (rows * tokens + CALL_COST) / taken if self.fits(rows, tokens) else float("inf")

            rows = min(self.row_buckets, key=cost)
            chunks.append(slice(start, start + rows))
            start += rows
        return chunks

    def bucket_for(self, num_tokens: int) -> int:
        return next(bucket for bucket in self.token_buckets if bucket >= num_tokens)

    def _run_chunk(self, chunk: list[EncoderInput]) -> np.ndarray:
        rows = next(bucket for bucket in self.row_buckets if bucket >= len(chunk))
        tokens = self.bucket_for(max(len(item.ids) for item in chunk))
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

