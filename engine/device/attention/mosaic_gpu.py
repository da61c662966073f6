"""Ragged paged attention as a Pallas Mosaic GPU kernel, for Hopper GPUs.

One call per layer serves a whole mixed step, prompt chunks and decodes alike. The model
has already written this step's keys and values to the cache (engine/models/llama.py), so every
query reads its keys from the cache alone: the positions up to its own, of its own row.

Work: engine/device/attention/work.py cuts the step into query tiles of one sequence each. A
program takes one tile, one KV head and one share of the tile's key blocks. Its 64 query
rows are the tile's tokens times the head's group of query heads (GQA), so that a decode
row's few heads still fill wgmma's M = 64 with real rows when several tokens share the tile.

Splitting the keys (flash-decoding): a decode step of few sequences has few tiles, 16
programs for Llama-3-8B at batch 1 on 132 SMs. When tiles x KV heads would leave the GPU
idle, each tile's key blocks are shared among programs (engine/device/attention/splits.py); each
writes its rows' output normalised over its own keys, in float32, with their log-sum-exp,
and the wrapper combines the shares. A share with no keys writes zeros and -inf.

Per program, one warpgroup:
- the tile's queries come in by TMA; scaled by the wrapper, laid out [kv head, token x
  group, d] so that a tile is a contiguous block of rows. That block starts on any row,
  and Mosaic GPU lets a TMA copy into a tiled buffer start only on a tile's edge, so they
  land in the (untiled) output buffer and move to the swizzled one wgmma reads through
  registers;
- keys and values come a block of `block_keys` at a time, one TMA copy per page (a page
  is `page_size` consecutive rows of the cache for one head), into one of two SMEM slots:
  block j + 1 loads while block j computes;
- scores by wgmma (Q K^T), the causal mask from the positions, the online softmax in
  float32 registers, and P V by wgmma;
- the rows that belong to the tile (tokens x group, not the padding to 64) go back by TMA
  in power-of-two pieces, so a program never writes the rows of another program's tile,
  with their log-sum-exp beside them (LSE_COLUMNS copies of it: a TMA row needs 16 bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from engine.device.attention.splits import combine_splits, key_block, key_splits
from engine.device.attention.work import FIRST_POSITION, FIRST_TOKEN, NUM_TOKENS, ROW, work_items

TILE_ROWS = 64  # query rows per program: wgmma's M
SWIZZLE_BYTES = 128
LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)
# Copies of a row's log-sum-exp the kernel writes: 128 bytes a row, so that every row of
# lse_smem starts where a TMA copy out of shared memory may start (128-byte aligned). With 8
# columns (32 bytes), the pieces `_store_rows` writes from an odd row faulted on an H100
# (CUDA_ERROR_MISALIGNED_ADDRESS at GQA groups of 1 and 3, 2026-11-27).
LSE_COLUMNS = 32
TMA_SMEM_ALIGNMENT = 128  # bytes: where a TMA copy out of shared memory may start
MAX_WGMMA_N = 256  # wgmma's largest N: the key block of Q K^T
SMEM_BYTES = 227 * 1024  # an H100's shared memory per block
REGISTER_BUDGET = 200  # 32-bit registers per thread for the program's arrays, of 255


def supports(dtype, head_dim: int, num_heads: int, num_kv_heads: int, page_size: int) -> bool:
    """Whether the kernel serves this shape: 16-bit caches (wgmma's bf16/f16 path) with
    head_dim a multiple of 64 (one 128-byte swizzled row), pages of whole 8-row tiles, a GQA
    group that fits one tile, and a program that fits wgmma, shared memory and registers."""
    group = num_heads // num_kv_heads
    return (jnp.dtype(dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)) and head_dim % 64 == 0
            and page_size % 8 == 0 and group <= TILE_ROWS and _fits(head_dim, key_block(page_size)))


def _fits(head_dim: int, block_keys: int) -> bool:
    """One program's key block within wgmma's N, its buffers (queries, output, two slots of
    keys and of values) within shared memory, and its float32 arrays (the running output,
    a block's P V, its scores and P in 16 bits) within the register budget of a warpgroup's
    128 threads."""
    # 16-bit queries (tiled and staged) and two slots of keys and of values, a float32
    # output and its log-sum-exp.
    smem = 2 * (2 * TILE_ROWS * head_dim + 2 * 2 * block_keys * head_dim) + 4 * TILE_ROWS * (head_dim + LSE_COLUMNS)
    registers = (2 * TILE_ROWS * head_dim + TILE_ROWS * block_keys + TILE_ROWS * block_keys // 2) // 128
    return block_keys <= MAX_WGMMA_N and smem <= SMEM_BYTES and registers <= REGISTER_BUDGET


# Jitted, so that a step calling it once per layer (the GPU's unrolled layer loop) lowers the
# kernel once and calls that one function from every layer. Inlined, each layer lowered it
# again: 0.75 s of Mosaic GPU lowering and 270 KB of module a layer for the 8B shape, measured
# on the CPU (BENCHMARKS.md "Issue 24 [2/6]: the first run on an H100").
@partial(jax.jit, static_argnames=("interpret", "splits"))
def ragged_paged_attention(q, k_cache, v_cache, layer, token_rows, positions, block_tables, scale: float,
                           *, interpret=None, splits: int | None = None):
    """Attention output [tokens, heads, d] of queries q [tokens, heads, d] over the paged cache
    [layers, pages, page_size, kv_heads, d] at `layer`, whose step keys are already written.
    `splits`: programs sharing each tile's keys (default: `key_splits`)."""
    num_tokens, num_heads, head_dim = q.shape
    page_size, num_kv = k_cache.shape[2], k_cache.shape[3]
    group = num_heads // num_kv
    tile_tokens = TILE_ROWS // group
    block_keys = key_block(page_size)
    tables = jnp.pad(block_tables, ((0, 0), (0, -block_tables.shape[1] % (block_keys // page_size))))
    work = work_items(token_rows, positions, block_tables.shape[0], tile_tokens)
    queries = (q.reshape(num_tokens, num_kv, group, head_dim) * scale).astype(k_cache.dtype)
    queries = queries.transpose(1, 0, 2, 3).reshape(num_kv, num_tokens * group, head_dim)
    # Room for a whole tile after the last token: every read stays in bounds.
    queries = jnp.pad(queries, ((0, 0), (0, TILE_ROWS), (0, 0)))
    splits = splits or key_splits(work.shape[0], num_kv, bool(interpret))
    call = _kernel(num_tokens * group, num_kv, head_dim, group, page_size, block_keys,
                   work.shape[0], splits, k_cache.dtype, interpret)
    partial, lse = call(work, jnp.asarray(layer, jnp.int32).reshape(1), tables, queries, k_cache, v_cache)
    rows = num_tokens * group
    out = combine_splits(partial[:, :, :rows], lse[:, :, :rows, 0])
    out = out.reshape(num_kv, num_tokens, group, head_dim).transpose(1, 0, 2, 3).reshape(q.shape)
    # Padding tokens' rows are never written: make them zeros rather than whatever was there.
    return jnp.where((token_rows >= 0)[:, None, None], out, 0).astype(q.dtype)


def _kernel(query_rows: int, num_kv: int, head_dim: int, group: int, page_size: int, block_keys: int,
            num_items: int, splits: int, dtype, interpret):
    tile = plgpu.TilingTransform((8, SWIZZLE_BYTES // jnp.dtype(dtype).itemsize))
    swizzle = plgpu.SwizzleTransform(SWIZZLE_BYTES)
    pages_per_block = block_keys // page_size
    shapes = _Shapes(group, page_size, block_keys, pages_per_block, head_dim, splits, dtype, bool(interpret))

    def body(work_ref, layer_ref, tables_ref, q_ref, k_ref, v_ref, out_ref, lse_ref):
        refs = (work_ref, layer_ref, tables_ref, q_ref, k_ref, v_ref, out_ref, lse_ref)
        pl.run_scoped(
            lambda *scratch: _program(shapes, refs, *scratch),
            plgpu.SMEM((TILE_ROWS, head_dim), dtype, transforms=(tile, swizzle)),
            plgpu.SMEM((2, block_keys, head_dim), dtype, transforms=(tile, swizzle)),
            plgpu.SMEM((2, block_keys, head_dim), dtype, transforms=(tile, swizzle)),
            plgpu.SMEM((TILE_ROWS, head_dim), dtype),  # the queries as they land (untiled)
            plgpu.SMEM((TILE_ROWS, head_dim), jnp.float32),
            plgpu.SMEM((TILE_ROWS, LSE_COLUMNS), jnp.float32),
            plgpu.Barrier(num_barriers=1),
            plgpu.Barrier(num_arrivals=pages_per_block, num_barriers=2),
            plgpu.Barrier(num_arrivals=pages_per_block, num_barriers=2),
        )

    # A tile's room after the last row, as for the queries: every TMA box, up to 64 rows,
    # lies inside the outputs, however few tokens the step has.
    rows = query_rows + TILE_ROWS
    out_type = (jax.ShapeDtypeStruct((splits, num_kv, rows, head_dim), jnp.float32),
                jax.ShapeDtypeStruct((splits, num_kv, rows, LSE_COLUMNS), jnp.float32))
    return plgpu.kernel(
        body, out_type=out_type, grid=(num_items, num_kv, splits), grid_names=("item", "kv_head", "split"),
        compiler_params=plgpu.CompilerParams(approx_math=True), interpret=interpret,
    )


@dataclass(frozen=True)
class _Shapes:
    """The static sizes one program works with."""

    group: int
    page_size: int
    block_keys: int
    pages_per_block: int
    head_dim: int
    splits: int  # programs sharing each tile's key blocks
    dtype: object
    interpret: bool  # GPU interpret mode (on the CPU) runs without register-layout hints

    def layout_cast(self, array, layout):
        return array if self.interpret else plgpu.layout_cast(array, layout)

    def iota(self, shape, dimension: int, layout):
        return self.layout_cast(lax.broadcasted_iota(jnp.int32, shape, dimension), layout)


def _program(shapes: _Shapes, refs, q_smem, k_smem, v_smem, q_landing, o_smem, lse_smem, q_barrier, k_barriers,
             v_barriers):
    work_ref, layer_ref, tables_ref, q_ref, k_ref, v_ref, out_ref, lse_ref = refs
    item, head, split = lax.axis_index("item"), lax.axis_index("kv_head"), lax.axis_index("split")
    row, first_token = work_ref[item, ROW], work_ref[item, FIRST_TOKEN]
    num_tokens, first_position = work_ref[item, NUM_TOKENS], work_ref[item, FIRST_POSITION]
    layer = layer_ref[0]

    def fetch(block, slot):
        """Start the TMA copies of one block of keys and values, a page at a time."""
        for index in range(shapes.pages_per_block):
            page = tables_ref[row, block * shapes.pages_per_block + index]
            rows = pl.ds(index * shapes.page_size, shapes.page_size)
            plgpu.copy_gmem_to_smem(k_ref.at[layer, page, :, head, :], k_smem.at[slot, rows], k_barriers.at[slot])
            plgpu.copy_gmem_to_smem(v_ref.at[layer, page, :, head, :], v_smem.at[slot, rows], v_barriers.at[slot])

    @pl.when(num_tokens > 0)
    def _():
        # The tile's first row is anywhere (first_token * group), and a TMA copy into a tiled
        # buffer must start on a tile's edge: the queries land untiled, then go through
        # registers into the tiled, swizzled q_smem that wgmma reads.
        plgpu.copy_gmem_to_smem(q_ref.at[head, pl.ds(first_token * shapes.group, TILE_ROWS)], q_landing,
                                q_barrier.at[0])
        # This program's share of the tile's key blocks: [start, stop).
        num_blocks = lax.div(first_position + num_tokens + shapes.block_keys - 1, shapes.block_keys)
        per_split = lax.div(num_blocks + shapes.splits - 1, shapes.splits)
        start = jnp.minimum(split * per_split, num_blocks)
        stop = jnp.minimum(start + per_split, num_blocks)

        @pl.when(start < stop)
        def _():
            fetch(start, 0)

        plgpu.barrier_wait(q_barrier.at[0])
        q_smem[...] = shapes.layout_cast(q_landing[...], plgpu.Layout.WGMMA)
        plgpu.commit_smem()  # wgmma reads q_smem through the async proxy
        # Each query row's position; the padding rows past the tile's tokens copy the last
        # token's, so that no row is left without keys (an all -inf row would give NaN).
        query_rows = shapes.iota((TILE_ROWS,), 0, plgpu.Layout.WGMMA.reduce(1))
        query_positions = first_position + jnp.minimum(lax.div(query_rows, shapes.group), num_tokens - 1)

        def step(block, carry):
            slot = lax.rem(block - start, 2)

            @pl.when(block + 1 < stop)
            def _():
                fetch(block + 1, 1 - slot)

            return _attend_block(shapes, q_smem, k_smem.at[slot], v_smem.at[slot], k_barriers.at[slot],
                                 v_barriers.at[slot], block, query_positions, carry)

        m, normaliser, acc = lax.fori_loop(start, stop, step, _empty_state(shapes))
        o_smem[...], lse_smem[...] = _share_result(shapes, m, normaliser, acc)
        plgpu.commit_smem()
        first_row, count = first_token * shapes.group, num_tokens * shapes.group
        _store_rows(o_smem, out_ref.at[split, head], first_row, count)
        _store_rows(lse_smem, lse_ref.at[split, head], first_row, count)


def _share_result(shapes: _Shapes, m, normaliser, acc):
    """(output [64, d] normalised over this share's keys, its log-sum-exp [64, LSE_COLUMNS]),
    in float32; zeros and -inf where the share had no keys (m is in log2 units)."""
    has_keys = normaliser > 0
    safe = jnp.where(has_keys, normaliser, 1.0)
    out = acc / lax.broadcast_in_dim(safe, acc.shape, [0])
    lse = jnp.where(has_keys, m * LN_2 + jnp.log(safe), -jnp.inf)
    lse = shapes.layout_cast(lax.broadcast_in_dim(lse, (TILE_ROWS, LSE_COLUMNS), [0]), plgpu.Layout.WGMMA)
    return out, lse


def _empty_state(shapes: _Shapes):
    reduced = plgpu.Layout.WGMMA.reduce(1)
    return (shapes.layout_cast(jnp.full((TILE_ROWS,), -jnp.inf, jnp.float32), reduced),
            shapes.layout_cast(jnp.full((TILE_ROWS,), 0, jnp.float32), reduced),
            shapes.layout_cast(jnp.full((TILE_ROWS, shapes.head_dim), 0, jnp.float32), plgpu.Layout.WGMMA))


def _attend_block(shapes: _Shapes, q_smem, k_slot, v_slot, k_barrier, v_barrier, block, query_positions, state):
    """Fold one block of keys into the online softmax (m in log2 units, as exp2 wants)."""
    m, normaliser, acc = state
    plgpu.barrier_wait(k_barrier)

    scores = _scores(shapes, q_smem, k_slot)
    key_positions = block * shapes.block_keys + shapes.iota((TILE_ROWS, shapes.block_keys), 1, plgpu.Layout.WGMMA)
    visible = key_positions <= lax.broadcast_in_dim(query_positions, scores.shape, [0])
    scores = jnp.where(visible, scores * LOG2_E, -jnp.inf)
    new_m = jnp.maximum(m, scores.max(axis=1))
    # A row that has seen no visible key yet keeps m = -inf: shift it by 0, so that its
    # scale and weights are exp2(-inf) = 0 rather than NaN. A share of the keys (flash-
    # decoding) can hold blocks entirely after some rows' positions.
    shift = jnp.where(new_m == -jnp.inf, 0.0, new_m)
    rescale = jnp.exp2(m - shift)
    weights = jnp.exp2(scores - lax.broadcast_in_dim(shift, scores.shape, [0]))
    normaliser = normaliser * rescale + weights.sum(axis=1)
    plgpu.barrier_wait(v_barrier)
    values = _weighted_values(shapes, weights.astype(shapes.dtype), v_slot)
    return new_m, normaliser, acc * lax.broadcast_in_dim(rescale, acc.shape, [0]) + values


def _scores(shapes: _Shapes, q_smem, k_slot):
    """Q K^T [64, block_keys] in float32, by wgmma with K transposed in SMEM."""
    if shapes.interpret:  # GPU interpret mode's wgmma takes no transposed operand
        return lax.dot_general(q_smem[...], k_slot[...], (((1,), (1,)), ((), ())),
                               preferred_element_type=jnp.float32)

    def product(acc_ref):
        plgpu.wgmma(acc_ref, q_smem, k_slot.transpose((1, 0)))
        return acc_ref[...]

    return pl.run_scoped(product, plgpu.ACC((TILE_ROWS, shapes.block_keys), jnp.float32))


def _weighted_values(shapes: _Shapes, weights, v_slot):
    """P V [64, d] in float32, by wgmma with P from registers and V in SMEM."""
    if shapes.interpret:  # GPU interpret mode's wgmma takes its left operand from SMEM only
        return jnp.dot(weights, v_slot[...], preferred_element_type=jnp.float32)

    def product(acc_ref):
        plgpu.wgmma(acc_ref, weights, v_slot)
        return acc_ref[...]

    # A fresh accumulator added in registers, rather than the running one fed back to wgmma
    # (which wants run_state): one add per element, against a block's two products.
    return pl.run_scoped(product, plgpu.ACC((TILE_ROWS, shapes.head_dim), jnp.float32))


def _store_rows(o_smem, out_rows, start: jax.Array, count: jax.Array):
    """Copy the first `count` rows of o_smem to out_rows[start:]: a TMA box has a static
    size, so the count is written as a sum of powers of two, one copy per set bit."""
    for offset, size, present in store_pieces(count):
        @pl.when(present)
        def _():
            plgpu.copy_smem_to_gmem(o_smem.at[pl.ds(offset, size)], out_rows.at[pl.ds(start + offset, size)])

    plgpu.wait_smem_to_gmem(0, wait_read_only=True)


def store_pieces(count):
    """(first row, rows, whether written) of each TMA copy `_store_rows` makes of `count`
    rows (traced, or an int for tests): largest first, so a piece of `size` rows starts on a
    multiple of 2 x size. A row of o_smem (head_dim floats) and of lse_smem (LSE_COLUMNS
    floats) is a multiple of TMA_SMEM_ALIGNMENT bytes, so every piece starts aligned."""
    pieces, copied, size = [], 0, TILE_ROWS
    while size >= 1:
        pieces.append((copied, size, (count & size) != 0))
        copied = copied + (count & size)
        size //= 2
    return pieces
