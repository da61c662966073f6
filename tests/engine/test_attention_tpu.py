"""JAX's Pallas TPU ragged paged attention behind the engine's signature (engine/device/attention/
ragged_tpu.py), and the cache it reads, one interleaved array per layer (engine/device/kv_cache.py
LayerKVCache), through the whole model.

No TPU is lent here, and jax 0.11.2's TPU interpret mode cannot run the kernel (it reshapes
a VMEM buffer; interpret mode reads buffers through indexers only: checked below, so that
a jax that can is noticed). So the adapter is checked against JAX's own reference of the
kernel's contract, `ref_ragged_paged_attention`, in the kernel's place: the interleaved
pages, the rows put in token order, the cumulative query lengths and the context lengths
are what the kernel reads, and the answer must be the engine's jnp reference attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import chunked_prompt_logits, make_step
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as tpu_kernel

from engine.device.attention import RAGGED_TPU, REFERENCE, attention_for, resolve
from engine.device.attention.ragged_tpu import ragged_tpu_attention, supports
from engine.device.attention.reference import paged_attention
from engine.device.kv_cache import KVCache, LayerKVCache, interleave

SCALE = 0.125


def step_case(rows, *, num_heads=4, num_kv=2, head_dim=128, page_size=16, num_tokens=None, num_rows=None, seed=0):
    num_tokens = num_tokens or 1 << (sum(new for _, new in rows) - 1).bit_length()
    step = make_step(rows, num_heads=num_heads, num_kv=num_kv, head_dim=head_dim, page_size=page_size,
                     num_tokens=num_tokens, num_rows=num_rows or len(rows), dtype=np.float32, seed=seed)
    pages = interleave(jnp.asarray(step.k_cache[step.layer]), jnp.asarray(step.v_cache[step.layer]))
    return step, pages, jax.tree_util.tree_map(jnp.asarray, step.batch)


def kernel_reference(q, *args, **options):
    """JAX's reference of the kernel, padded as the kernel's output is: it returns the real
    tokens' rows alone."""
    out = tpu_kernel.ref_ragged_paged_attention(q, *args, **options)
    return jnp.zeros(q.shape, out.dtype).at[: out.shape[0]].set(out)


def check(rows, **shape):
    step, pages, batch = step_case(rows, **shape)
    out = np.asarray(ragged_tpu_attention(jnp.asarray(step.q), None, None, pages, None, 0, batch, SCALE,
                                          kernel=kernel_reference))
    expected = np.asarray(paged_attention(*map(jnp.asarray, (step.q, step.k, step.v, step.k_cache, step.v_cache)),
                                          step.layer, step.batch, SCALE))
    real = step.batch.token_rows >= 0
    np.testing.assert_allclose(out[real], expected[real], rtol=2e-4, atol=2e-4)
    assert not out[~real].any(), "padding tokens must come back as zeros"


def test_decode_rows_of_ragged_lengths():
    check([(0, 1), (5, 1), (16, 1), (31, 1), (100, 1)], num_tokens=8)


def test_a_mixed_step_with_padding_rows_and_tokens():
    # Single-token rows first, then prompt chunks over a cached prefix and a fresh prompt,
    # in a bucket of more tokens and rows than the step holds.
    check([(12, 1), (33, 1), (40, 24), (0, 9)], num_tokens=64, num_rows=6, seed=1)


@pytest.mark.parametrize("num_heads,num_kv", [(8, 2), (8, 8)])
def test_gqa_groups(num_heads, num_kv):
    check([(3, 1), (0, 12), (50, 7)], num_heads=num_heads, num_kv=num_kv, seed=num_heads)


def test_tpu_interpret_mode_still_cannot_run_the_kernel():
    """What keeps the kernel itself off the CPU. When a jax runs it in interpret mode, this
    fails: test the kernel in interpret mode instead of its reference."""
    step, pages, batch = step_case([(5, 1), (0, 6)], num_tokens=8)
    blocks = {"num_kv_pages_per_block": 1, "num_queries_per_block": 8}  # its tuned table wants a TPU version
    with pytest.raises(Exception, match="ReshapeTransform"), pltpu.force_tpu_interpret_mode():
        jax.block_until_ready(ragged_tpu_attention(jnp.asarray(step.q), None, None, pages, None, 0, batch, SCALE,
                                                   kernel=lambda *args, **kw: tpu_kernel.ragged_paged_attention(
                                                       *args, **kw, **blocks)))


def test_auto_takes_the_tpu_kernel_on_tpus_for_shapes_it_serves(monkeypatch):
    import engine.device.attention as attention

    assert supports(jnp.bfloat16, 128, 32, 8, 16) and not supports(jnp.bfloat16, 64, 9, 3, 16)
    assert resolve("auto", "bfloat16", 128, 32, 8, 16) == REFERENCE  # here, a CPU
    monkeypatch.setattr(attention, "on_tpu", lambda: True)
    assert resolve("auto", "bfloat16", 128, 32, 8, 16) == RAGGED_TPU
    assert resolve("auto", "bfloat16", 64, 9, 3, 16) == REFERENCE  # head_dim in whole lanes only


def test_the_per_layer_cache_writes_and_copies_what_the_stacked_one_does():
    rng = np.random.default_rng(0)
    stacked = KVCache(*(jnp.asarray(rng.standard_normal((2, 6, 4, 2, 8)), jnp.float32) for _ in range(2)))
    per_layer = LayerKVCache(tuple(interleave(stacked.k[layer], stacked.v[layer]) for layer in range(2)))
    k, v = (jnp.asarray(rng.standard_normal((3, 2, 8)), jnp.float32) for _ in range(2))
    pages, offsets = jnp.array([1, 1, 4]), jnp.array([0, 3, 2])
    stacked, per_layer = stacked.write(1, pages, offsets, k, v), per_layer.write(1, pages, offsets, k, v)
    sources, destinations = jnp.array([1, 0]), jnp.array([5, 0])
    stacked, per_layer = stacked.copy_pages(sources, destinations), per_layer.copy_pages(sources, destinations)
    for layer in range(2):
        np.testing.assert_array_equal(per_layer.layers[layer][..., 0::2, :], stacked.k[layer])
        np.testing.assert_array_equal(per_layer.layers[layer][..., 1::2, :], stacked.v[layer])
    assert per_layer.page_size == stacked.page_size == 4


def test_ragged_tpu_off_a_tpu_is_refused_by_name():
    with pytest.raises(ValueError, match="TPUs only"):
        attention_for(RAGGED_TPU)


def reference_over_interleaved_pages(q, k, v, pages, v_cache, layer, batch, scale):
    """The jnp reference reading a LayerKVCache layer: what the kernel stands for here."""
    keys, values = pages[None, :, :, 0::2], pages[None, :, :, 1::2]
    return paged_attention(q, k, v, keys, values, 0, batch, scale)


def test_model_on_a_cache_per_layer_matches_the_stacked_model(monkeypatch):
    """Through ModelRunner: the per-layer interleaved cache written by the model, the
    unrolled layers and the adapter's operands, a prompt in two chunks and then a decode,
    against the same model on the stacked cache. The kernel is the only part left out."""
    import engine.device.runner
    from engine.config import ModelConfig

    real_attention_for = engine.device.runner.attention_for
    monkeypatch.setattr(engine.device.runner, "attention_for", lambda name, *args: (
        reference_over_interleaved_pages if name == RAGGED_TPU else real_attention_for(name, *args)))
    config = ModelConfig(vocab_size=64, hidden_size=128, intermediate_size=128, num_layers=2,
                         num_heads=4, num_kv_heads=2, head_dim=128)

    def logits(attention):
        logits, runner = chunked_prompt_logits(config, attention, optimize_compiled_code=False)
        assert runner.attention == attention
        assert isinstance(runner.kv_cache, LayerKVCache) == (attention == RAGGED_TPU)
        return logits

    np.testing.assert_allclose(logits(RAGGED_TPU), logits(REFERENCE), rtol=1e-5, atol=1e-5)
