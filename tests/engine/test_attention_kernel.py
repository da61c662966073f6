"""The Mosaic GPU ragged paged attention kernel against the jnp reference.

On the CPU the kernel runs in GPU interpret mode (FLINT_KERNEL_MODE=interpret, the default):
its TMA copies, barriers, paging, masks, online softmax and row stores run as written, and
only its two wgmma products become plain dots. `FLINT_KERNEL_MODE=compiled` runs the kernel
for real on a GPU (tools/gpu_check.sh). Either way the kernel also lowers to a Mosaic GPU
module for the 8B and SmolLM2 shapes, which checks what interpret mode cannot: the layouts
and the wgmma operands."""

from __future__ import annotations

import dataclasses
import os
import re
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from attention_cases import chunked_prompt_logits, make_step
from jax import export

from engine.config import EngineConfig
from engine.device.attention import MOSAIC_GPU, REFERENCE, interpret_params, resolve
from engine.device.attention.mosaic_gpu import ragged_paged_attention, supports
from engine.device.attention.reference import paged_attention
from engine.device.attention.work import work_items

COMPILED = os.environ.get("FLINT_KERNEL_MODE", "interpret") == "compiled"
BF16 = ml_dtypes.bfloat16
SCALE = 0.125
# P is rounded to bfloat16 before P V: about 3e-3 of relative error; float32 gives ~1e-6.
TOLERANCE = 1e-2


@pytest.fixture(autouse=True)
def a_gpu_fault_ends_its_process():
    """Compiled, a kernel that faults (an illegal address, say) leaves the process's CUDA
    context failing every later launch, and took the whole file down once (first GPU run,
    BENCHMARKS.md). After each test the GPU must still run a trivial program; if it cannot,
    the process ends, and tools/gpu_check.sh's pytest-xdist starts a fresh worker: one fault
    fails one test, whose report (sent before this teardown) names it."""
    yield
    if not COMPILED:
        return
    try:
        jax.block_until_ready(jnp.arange(8) + 1)
    except Exception as error:  # noqa: BLE001 - any failure here means the context is gone
        print(f"the GPU no longer runs programs after this test: {error}", file=sys.stderr, flush=True)
        os._exit(70)


def run_kernel(step, dtype=BF16, splits=None):
    return np.asarray(ragged_paged_attention(
        jnp.asarray(step.q, dtype), jnp.asarray(step.k_cache, dtype), jnp.asarray(step.v_cache, dtype),
        step.layer, jnp.asarray(step.batch.token_rows), jnp.asarray(step.batch.positions),
        jnp.asarray(step.batch.block_tables), SCALE, interpret=None if COMPILED else interpret_params(),
        splits=splits), np.float32)


def run_reference(step):
    """The reference in float32 on the kernel's bf16-rounded inputs."""
    rounded = [np.asarray(a).astype(BF16).astype(np.float32) for a in (step.q, step.k, step.v, step.k_cache, step.v_cache)]
    return np.asarray(paged_attention(*map(jnp.asarray, rounded), step.layer, step.batch, SCALE))


def check(rows, *, num_heads=4, num_kv=2, head_dim=64, page_size=16, num_tokens=None, num_rows=None, seed=0,
          splits=None):
    num_tokens = num_tokens or 1 << (sum(new for _, new in rows) - 1).bit_length()
    step = make_step(rows, num_heads=num_heads, num_kv=num_kv, head_dim=head_dim, page_size=page_size,
                     num_tokens=num_tokens, num_rows=num_rows or len(rows), dtype=np.float32, seed=seed)
    out, expected = run_kernel(step, splits=splits), run_reference(step)
    real = step.batch.token_rows >= 0
    assert np.isfinite(out).all()
    error = np.linalg.norm(out[real] - expected[real]) / np.linalg.norm(expected[real])
    assert error < TOLERANCE, error
    assert not out[~real].any(), "padding tokens must come back as zeros"
    # Each real token matches on its own too: no token borrows another row's keys.
    per_token = np.linalg.norm(out[real] - expected[real], axis=(1, 2)) / np.linalg.norm(expected[real], axis=(1, 2))
    assert per_token.max() < 3 * TOLERANCE, per_token.max()


@pytest.mark.parametrize("splits", [1, 3])
def test_decode_rows_of_ragged_lengths(splits):
    # With 3 programs sharing a row's keys, the 165-key row gives each one block; the short
    # rows leave shares with no keys, which must weigh nothing.
    check([(0, 1), (5, 1), (16, 1), (31, 1), (100, 1), (164, 1)], splits=splits)


@pytest.mark.parametrize("splits", [1, 2])
def test_prefill_only_chunks_spanning_tiles_and_blocks(splits):
    # Group 2 -> 32 tokens per tile: 70 tokens make three tiles; 150 keys three key blocks.
    check([(0, 70), (80, 40)], num_tokens=128, splits=splits)


def test_a_decode_of_few_rows_shares_its_keys_and_a_full_step_does_not():
    """Flash-decoding where the GPU would sit idle: the share count fills it."""
    from engine.device.attention.splits import key_splits

    assert key_splits(2, 8, interpret=False) == 16  # Llama-3-8B at batch 1: 16 programs, 256 shared
    assert key_splits(96, 8, interpret=False) == 1  # a 512-token step: 768 programs already


def test_mixed_step_with_prefix_and_fresh_prompts():
    check([(12, 1), (0, 9), (33, 1), (40, 24), (7, 1)], num_tokens=64, seed=1)


@pytest.mark.parametrize("page_size", [8, 16, 32, 48])
def test_page_boundaries(page_size):
    # Contexts that end just before, on and after page edges.
    rows = [(page_size - 1, 1), (page_size, 1), (page_size + 1, 2), (2 * page_size - 3, 5)]
    check(rows, page_size=page_size, seed=page_size)


@pytest.mark.parametrize("num_heads,num_kv", [(4, 4), (9, 3), (8, 2), (16, 2), (64, 1)])
def test_gqa_groups(num_heads, num_kv):
    check([(3, 1), (0, 12), (21, 1), (50, 7)], num_heads=num_heads, num_kv=num_kv, seed=num_heads)


def test_head_dim_128_as_in_llama_8b():
    check([(9, 1), (0, 20), (70, 3)], num_heads=8, num_kv=2, head_dim=128)


def test_empty_rows_and_padding_in_the_bucket():
    # A bucket of 8 rows and 32 tokens holding 3 rows and 9 tokens.
    check([(4, 1), (0, 6), (15, 2)], num_tokens=32, num_rows=8)


def test_work_items_cover_every_token_once():
    step = make_step([(3, 1), (0, 40), (10, 1), (5, 17)], num_heads=8, num_kv=2, head_dim=8, page_size=4,
                     num_tokens=64, num_rows=6, dtype=np.float32)
    items = np.asarray(work_items(jnp.asarray(step.batch.token_rows), jnp.asarray(step.batch.positions), 6, 16))
    covered = np.zeros(64, int)
    for row, first, count, first_position in items:
        covered[first:first + count] += 1
        assert (step.batch.token_rows[first:first + count] == row).all()
        assert step.batch.positions[first] == first_position or count == 0
        assert count <= 16
    assert (covered == (step.batch.token_rows >= 0)).all()


def test_auto_takes_the_kernel_only_on_gpus_for_shapes_it_serves():
    on_gpu = jax.default_backend() == "gpu"
    assert resolve("auto", "bfloat16", 128, 32, 8, 16) == (MOSAIC_GPU if on_gpu else REFERENCE)
    assert resolve("auto", "float32", 128, 32, 8, 16) == REFERENCE
    assert not supports(jnp.float32, 64, 9, 3, 16) and not supports(jnp.bfloat16, 32, 4, 2, 16)
    assert not supports(jnp.bfloat16, 64, 4, 2, 4) and supports(jnp.bfloat16, 64, 9, 3, 16)
    # Within the hardware: head_dim 256's arrays overflow a thread's registers, 80-token
    # pages make 320-key blocks (wgmma's N stops at 256).
    assert not supports(jnp.bfloat16, 256, 8, 1, 16) and not supports(jnp.bfloat16, 128, 32, 8, 80)
    with pytest.raises(ValueError, match="attention"):
        resolve("flash", "bfloat16", 128, 32, 8, 16)


@pytest.mark.parametrize("group", [1, 2, 3, 4, 8])
def test_every_row_store_starts_where_tma_may_read_shared_memory(group):
    """The output rows of a tile go out in power-of-two pieces from any row: each must start
    128-byte aligned in shared memory, or the copy faults (an H100, GQA groups 1 and 3,
    2026-11-27). Checked for every count of rows a tile can hold, in both buffers."""
    from engine.device.attention.mosaic_gpu import LSE_COLUMNS, TILE_ROWS, TMA_SMEM_ALIGNMENT, store_pieces

    row_bytes = [4 * LSE_COLUMNS] + [4 * head_dim for head_dim in (64, 128, 256)]  # float32 rows
    for count in range(group, TILE_ROWS // group * group + 1, group):
        pieces = [(first, size) for first, size, present in store_pieces(count) if present]
        assert sum(size for _, size in pieces) == count and pieces[0][0] == 0
        for first, _ in pieces:
            assert all(first * width % TMA_SMEM_ALIGNMENT == 0 for width in row_bytes), (count, first)


SERVING = EngineConfig()  # the default buckets (1 token, then 4 to 512) and rows of `flint serve`
LOWERED_SHAPES = ([(32, 8, 128, tokens) for tokens in SERVING.token_buckets]  # Llama-3-8B: every bucket
                  + [(9, 3, 64, tokens) for tokens in (1, SERVING.token_buckets[-1])])  # SmolLM2: both ends


@pytest.mark.parametrize("num_heads,num_kv,head_dim,tokens", LOWERED_SHAPES)
def test_kernel_lowers_to_mosaic_gpu(num_heads, num_kv, head_dim, tokens):
    """Lowered for CUDA from any machine, at the shapes the engine compiles: Mosaic GPU
    checks layouts, TMA boxes and wgmma shapes here, which interpret mode cannot."""
    def attend(q, k_cache, v_cache, layer, token_rows, positions, tables):
        return ragged_paged_attention(q, k_cache, v_cache, layer, token_rows, positions, tables, SCALE)

    rows = SERVING.seq_bucket(tokens)
    cache = jax.ShapeDtypeStruct((2, 64, 16, num_kv, head_dim), jnp.bfloat16)
    token_array = jax.ShapeDtypeStruct((tokens,), jnp.int32)
    args = (jax.ShapeDtypeStruct((tokens, num_heads, head_dim), jnp.bfloat16), cache, cache,
            jax.ShapeDtypeStruct((), jnp.int32), token_array, token_array, jax.ShapeDtypeStruct((rows, 8), jnp.int32))
    module = export.export(jax.jit(attend), platforms=["cuda"])(*args).mlir_module()
    assert "mosaic_gpu" in module


def test_a_step_of_many_layers_lowers_the_kernel_once():
    """The GPU unrolls the layers (engine/models/layers.py): each calls the kernel, and the
    module holds it once. Lowered per layer, an 8B step took 32 kernel lowerings a bucket."""
    cache = jax.ShapeDtypeStruct((3, 8, 16, 2, 64), jnp.bfloat16)
    tokens = jax.ShapeDtypeStruct((4,), jnp.int32)

    def three_layers(q, k_cache, v_cache, token_rows, positions, tables):
        for layer in range(3):
            q = ragged_paged_attention(q, k_cache, v_cache, layer, token_rows, positions, tables, SCALE)
        return q

    args = (jax.ShapeDtypeStruct((4, 4, 64), jnp.bfloat16), cache, cache, tokens, tokens,
            jax.ShapeDtypeStruct((4, 8), jnp.int32))
    module = export.export(jax.jit(three_layers), platforms=["cuda"])(*args).mlir_module()
    assert re.findall(r"custom_call @(mosaic_gpu\w*)", module) == ["mosaic_gpu_v2"]


def test_model_with_the_kernel_matches_the_reference_model():
    """Through ModelRunner: the model writes the step's keys before the kernel reads them,
    a prompt in two chunks and then a decode, in bfloat16, against the same model on the
    reference attention."""
    from engine.config import ModelConfig

    config = ModelConfig(vocab_size=64, hidden_size=128, intermediate_size=128, num_layers=2,
                         num_heads=4, num_kv_heads=2, head_dim=64)

    def logits(attention):
        logits, runner = chunked_prompt_logits(config, attention, dtype="bfloat16")
        assert runner.attention == attention
        return logits

    kernel, reference = logits(MOSAIC_GPU), logits(REFERENCE)
    error = np.linalg.norm(kernel - reference) / np.linalg.norm(reference)
    assert error < 2e-2, error


def test_the_start_up_check_passes_the_kernel_and_catches_a_broken_one():
    from engine.device.attention import attention_for, reference_attention
    from engine.device.attention.probe import kernel_problem, probe_rows

    kernel = attention_for(MOSAIC_GPU)
    buckets = ((1, 1), (32, 3))  # the smallest bucket and a larger one, as the runner passes them
    assert kernel_problem(kernel, reference_attention, 8, 2, 64, 16, jnp.bfloat16, buckets) is None
    # Both probe steps read a context of three key blocks: both slots, and a slot's second use.
    for tokens, _ in buckets:
        assert max(cached + new for cached, new in probe_rows(16, tokens)) > 2 * 64

    def off_by_one_row(q, k, v, k_cache, v_cache, layer, batch, scale):
        return jnp.roll(kernel(q, k, v, k_cache, v_cache, layer, batch, scale), 1, axis=0)

    def first_key_block_only(q, k, v, k_cache, v_cache, layer, batch, scale):
        """Right within the first 64 keys (4 pages), garbage (page 0) beyond."""
        tables = batch.block_tables.at[:, 4:].set(0)  # under jit: the batch's arrays are traced
        return reference_attention(q, k, v, k_cache, v_cache, layer, dataclasses.replace(batch, block_tables=tables),
                                   scale)

    def fails_at_one_token(q, *args):
        if q.shape[0] == 1:
            raise RuntimeError("ptxas rejected it")
        return kernel(q, *args)

    def check(broken):
        return kernel_problem(broken, reference_attention, 8, 2, 64, 16, jnp.bfloat16, buckets)

    assert "differs from the reference" in check(off_by_one_row)
    assert "differs from the reference" in check(first_key_block_only)
    assert "ptxas rejected it" in check(fails_at_one_token) and "the 1-token bucket" in check(fails_at_one_token)


def test_auto_falls_back_to_the_reference_when_the_kernel_fails_its_check(monkeypatch, caplog):
    import engine.device.attention as attention

    monkeypatch.setattr(attention, "kernel_problem", lambda *args: "RuntimeError: no sm_90a")
    monkeypatch.setattr(attention, "resolve", lambda name, *shape, **options: MOSAIC_GPU)  # as on a GPU
    choice = attention.choose("auto", "bfloat16", 128, 32, 8, 16)
    assert choice.in_use == REFERENCE and "no sm_90a" in choice.fallback
    assert "no sm_90a" in caplog.text
    # Asked for by name off a GPU: GPU interpret mode, with no compiler of the machine's to check.
    monkeypatch.setattr(attention, "on_gpu", lambda: False)
    assert attention.choose(MOSAIC_GPU, "bfloat16", 128, 32, 8, 16) == attention.AttentionChoice(
        MOSAIC_GPU, MOSAIC_GPU)
    # Asked for by name on a GPU: checked, and a failure stops the start with the reason.
    monkeypatch.setattr(attention, "on_gpu", lambda: True)
    with pytest.raises(attention.KernelUnavailable, match="no sm_90a"):
        attention.choose(MOSAIC_GPU, "bfloat16", 128, 32, 8, 16)
    monkeypatch.setattr(attention, "resolve", lambda name, *shape, **options: REFERENCE)  # as on a CPU
    assert attention.choose("auto", "float32", 128, 32, 8, 16) == attention.AttentionChoice("auto", REFERENCE)


def test_a_float8_cache_is_read_by_the_reference_where_auto_would_take_a_kernel(monkeypatch):
    import engine.device.attention as attention

    monkeypatch.setattr(attention, "resolve", lambda name, *shape, **options: MOSAIC_GPU)  # as on a GPU
    choice = attention.choose("auto", "bfloat16", 128, 32, 8, 16, float8_cache=True)
    assert choice.in_use == REFERENCE and "float8" in choice.fallback
    with pytest.raises(ValueError, match="reads no float8"):
        attention.choose(MOSAIC_GPU, "bfloat16", 128, 32, 8, 16, float8_cache=True)
