"""The native CPU kernels (engine/device/native) against the jnp code they replace.

Each kernel is compared with its reference on random inputs: the int8 and bfloat16
products over token counts that fill whole register tiles, partial ones and the path
through a widened buffer; layers of a stack read in place under a scan; the decode
attention over scattered pages, contexts on page edges, empty rows and padding. Then a
model on the kernels against the same model on jnp, through ModelRunner, and the engine's
choice of path: native where the library is built, jnp where it is hidden
(FLINT_NATIVE_CPU=0, as on a machine without a compiler), and refused by name where it
cannot run. CI runs the rest of the suite on the native path (the default), so both paths
are tested there.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import chunked_prompt_logits, make_step
from native_kernels import require_native_kernels
from numpy_reference import served_head

from engine.config import EngineConfig, ModelConfig
from engine.device import native
from engine.device import attention
from engine.device.attention import NATIVE_CPU, REFERENCE, choose
from engine.device.attention.native_cpu import native_cpu_attention
from engine.device.attention.reference import paged_attention
from engine.device.kv_cache import readable, storage_dtype, stored
from engine.device.native import ops
from engine.device.integer_weight import Int8Weight, dequantize
from engine.device.weights import HEAD_GROUP_SIZE, group_size, quantize_int8
from engine.models import layers, llama
from engine.models.params import random_params

@pytest.fixture(autouse=True)
def kernels_built():
    require_native_kernels()

SCALE = 0.125


def random_matrix(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def in_bfloat16(x):
    """x as the kernel's products take it: rounded to bfloat16 (ops.linear)."""
    return x.astype(jnp.bfloat16).astype(jnp.float32)


def widened(weight: Int8Weight, layer: int):
    """Layer `layer` of an int8 stack as the kernel takes it: each value exactly, times its
    group's scale in float32 (blocks.h sums a group unscaled, then scales it)."""
    return dequantize(Int8Weight(weight.values[layer], weight.scales[layer]))


def products_path() -> str:
    """Which products this build runs, for the tests' own words: pairs of bfloat16
    (AVX512_BF16) or float32 multiply-adds."""
    return "pairs of bfloat16" if native.products_in_pairs() else "float32"


@pytest.mark.parametrize("tokens", [1, 2, 3, 4, 5, 8, 9, 17, 32, 33])
@pytest.mark.parametrize("out,width,group", [(96, 64, 64), (48, 192, 64), (16, 576, 64), (80, 160, 64),
                                             (16, 576, HEAD_GROUP_SIZE), (32, 96, HEAD_GROUP_SIZE)])
def test_int8_product_matches_the_widened_weights(tokens, out, width, group):
    # One token to 33: up to 4 tokens a row at a time, widened in registers (partial token
    # tiles of 2 and 3); from 5 a chunk's rows widened once into a buffer and met by tiles of
    # 4 tokens, the last partial. A width of 160 in groups of 64 is one group of 160.
    weight = quantize_int8(jnp.asarray(random_matrix((3, out, width), seed=out)), group)
    assert weight.scales.shape[-1] == width // group_size(width, group)
    x = jnp.asarray(random_matrix((tokens, width), seed=tokens))
    for layer in range(3):
        expected = in_bfloat16(x) @ widened(weight, layer).T
        got = ops.linear(x, ops.at_layer(ops.packed(weight), layer))
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-4,
                                   err_msg=products_path())


@pytest.mark.parametrize("tokens", [1, 6, 40])
def test_bfloat16_product_matches_the_widened_weights(tokens):
    weight = jnp.asarray(random_matrix((64, 128), seed=1), jnp.bfloat16)
    x = jnp.asarray(random_matrix((tokens, 128), seed=2))
    expected = in_bfloat16(x) @ weight.astype(jnp.float32).T
    got = ops.linear(x, ops.at_layer(ops.packed(weight), 0))
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-4, err_msg=products_path())


def rows_among_others(rows, tokens: int, seed: int):
    """`rows` [r, in] placed at scattered places among `tokens` random others: (x, where)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, rows.shape[1])).astype(np.float32)
    where = rng.choice(tokens, size=min(len(rows), tokens), replace=False)
    x[where] = rows[:len(where)]
    return jnp.asarray(x), where


@pytest.mark.parametrize("kind", ["int8", "bfloat16", "int8 head"])
def test_a_row_s_product_is_the_same_bits_at_every_count_of_tokens(kind):
    """One order of sums for every output (blocks.h): a row's product alone is bit for bit
    its product among 1 to 64 tokens, at any place among them, through every tile."""
    width = 576
    matrix = jnp.asarray(random_matrix((2, 80, width), seed=7))
    weight = {"int8": quantize_int8(matrix), "bfloat16": matrix[0].astype(jnp.bfloat16),
              "int8 head": quantize_int8(matrix, HEAD_GROUP_SIZE)}[kind]
    native_weight = ops.at_layer(ops.packed(weight), 1 if kind == "int8" else 0)
    assert_the_same_bits_among_any_tokens(native_weight, random_matrix((3, width), seed=8), kind)


def assert_the_same_bits_among_any_tokens(native_weight, rows, label: str) -> None:
    """Each of `rows`' products alone is bit for bit its product among 1 to 64 tokens, at
    scattered places among them."""
    alone = np.stack([np.asarray(ops.linear(jnp.asarray(row[None]), native_weight))[0] for row in rows])
    for tokens in range(1, 65):
        x, where = rows_among_others(rows, tokens, seed=tokens)
        got = np.asarray(ops.linear(x, native_weight))[where]
        assert (got == alone[:len(where)]).all(), f"{label}, {tokens} tokens, {products_path()}"


@pytest.mark.parametrize("kind", ["int8", "bfloat16", "Q4_K blocks"])
def test_a_step_s_padding_rows_are_zeros_and_its_live_rows_the_same_bits(kind):
    """Past a step's live tokens (a bucket's padding, engine/models/layers.py `live_tokens`)
    no product is summed: those rows are zeros, and the live rows the whole call's bits."""
    import gguf
    from gguf_block_files import random_blocks

    from engine.loader.gguf_blocks import blocks_of

    q4_k = gguf.GGMLQuantizationType.Q4_K
    matrix = jnp.asarray(random_matrix((80, 512), seed=9))
    weight = {"int8": lambda: quantize_int8(matrix), "bfloat16": lambda: matrix.astype(jnp.bfloat16),
              "Q4_K blocks": lambda: blocks_of(random_blocks(q4_k, (80, 512), 9), q4_k, (80, 512))}[kind]()
    packed = ops.packed(weight)
    x = jnp.asarray(random_matrix((40, 512), seed=10))
    whole = np.asarray(ops.linear(x, ops.at_layer(packed, 0)))
    for live in (0, 1, 5, 39, 40):
        got = np.asarray(ops.linear(x, ops.at_layer(packed, 0, live)))
        assert (got[:live] == whole[:live]).all(), f"{kind}: the live rows moved at {live} live"
        assert not got[live:].any(), f"{kind}: padding rows computed at {live} live"


def test_products_run_in_pairs_where_the_cpu_has_them():
    # Built for this machine (setup.py's default), the pairs are there where the CPU has them.
    if os.environ.get("FLINT_NATIVE_MARCH", "native") != "native" or not os.path.exists("/proc/cpuinfo"):
        pytest.skip("built for another CPU than this one, or no /proc/cpuinfo to read it from")
    with open("/proc/cpuinfo") as cpuinfo:
        flags = cpuinfo.read()
    assert native.products_in_pairs() == (" avx512_bf16" in flags)
    # The start-up log names the paths this CPU takes (engine/engine.py `describe`).
    paths = native.kernel_paths()
    assert ("pairs of bfloat16" in paths) == (" avx512_bf16" in flags)
    assert ("int8 inputs" in paths) == (" avx512_vnni" in flags and os.environ.get("FLINT_NATIVE_DOTS", "1") != "0")


def test_a_scan_reads_each_layer_of_the_stack():
    """The index traced by a scan picks the layer: layer i's product, not layer 0's."""
    weight = quantize_int8(jnp.asarray(random_matrix((4, 32, 64), seed=5)))
    x = jnp.asarray(random_matrix((2, 64), seed=6))

    def body(_, layer):
        return None, ops.linear(x, ops.at_layer(ops.packed(weight), layer))

    _, per_layer = jax.jit(lambda: jax.lax.scan(body, None, jnp.arange(4)))()
    for layer in range(4):
        expected = in_bfloat16(x) @ widened(weight, layer).T
        np.testing.assert_allclose(np.asarray(per_layer[layer]), np.asarray(expected), rtol=1e-5, atol=1e-4)


def test_the_kernel_serves_whole_blocks_only():
    rows, step = native.block_shape()
    assert ops.serves(quantize_int8(jnp.zeros((2, 16, 128))))
    assert not ops.serves(quantize_int8(jnp.zeros((2, 12, 128))))  # rows not a whole block (8 or 16)
    assert ops.serves(quantize_int8(jnp.zeros((2, 16, 48))))  # a width of one group of 48
    assert ops.serves(quantize_int8(jnp.zeros((2, 16, 47)))) == (step == 1)  # no whole pairs of inputs
    assert not ops.serves(jnp.zeros((16, 128), jnp.float32))  # float32 weights stay with XLA


def test_a_packed_weight_unpacks_to_itself_and_gives_its_rows():
    """The kernel's blocks (ops.packed) hold every value and scale once, where the embedding's
    lookup of an int8 head finds its rows again."""
    weight = quantize_int8(jnp.asarray(random_matrix((2, 48, 96), seed=3)), HEAD_GROUP_SIZE)
    packed = ops.packed(weight)
    rows, step = native.block_shape()
    assert packed.values.shape == (2, 48 // rows, 96 // step, rows * step) and packed.shape == (2, 48, 96)
    back = ops.unpacked(packed)
    assert (back.values == weight.values).all() and (back.scales == weight.scales).all()
    ids = jnp.asarray([0, 17, 47, 5, 17])
    looked_up = ops.packed_rows(ops.packed(Int8Weight(weight.values[1], weight.scales[1])), ids)
    assert (looked_up.values == weight.values[1][ids]).all() and (looked_up.scales == weight.scales[1][ids]).all()


def check_attention(rows, *, num_heads=4, num_kv=2, head_dim=64, page_size=16, num_tokens=None, num_rows=None,
                    seed=0, cache_dtype=jnp.float32):
    """The kernel against the reference, both over the same cache: of `cache_dtype`, or of
    (keys, values) dtypes (bfloat16 and float8 caches the kernel widens as it reads, the
    reference through kv_cache.readable and jnp's promotion)."""
    key_dtype, value_dtype = cache_dtype if isinstance(cache_dtype, tuple) else (cache_dtype, cache_dtype)
    num_tokens = num_tokens or 1 << (sum(new for _, new in rows) - 1).bit_length()
    step = make_step(rows, num_heads=num_heads, num_kv=num_kv, head_dim=head_dim, page_size=page_size,
                     num_tokens=num_tokens, num_rows=num_rows or len(rows), dtype=np.float32, seed=seed)
    k_cache = stored(jnp.asarray(step.k_cache), storage_dtype(key_dtype))
    v_cache = stored(jnp.asarray(step.v_cache), storage_dtype(value_dtype))
    # The cache holds the step's keys, as the model writes them before its attention; the
    # reference takes them as the cache holds them (the kernel reads them from there).
    k, v = (readable(stored(jnp.asarray(a), storage_dtype(dtype))).astype(jnp.float32)
            for a, dtype in ((step.k, key_dtype), (step.v, value_dtype)))
    operands = [jnp.asarray(step.q), k, v, k_cache, v_cache]
    got = np.asarray(native_cpu_attention(*operands, step.layer, step.batch, SCALE))
    expected = np.asarray(paged_attention(*operands, step.layer, step.batch, SCALE))
    real = step.batch.token_rows >= 0
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[real], expected[real], rtol=2e-5, atol=2e-5)


# float32, bfloat16 and float8 caches, and keys in bfloat16 with values in float8 (auto's).
CACHE_DTYPES = ["float32", "bfloat16", "float8_e4m3fn", ("bfloat16", "float8_e4m3fn")]


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("page_size", [8, 16, 32])
def test_a_token_s_attention_is_the_same_bits_whatever_shares_the_step(page_size, cache_dtype):
    """A token's attention reads only its own query, its row's pages and its position: alone,
    or among up to 64 tokens of other rows and positions (padding among them), at any place
    in the step, it is the same bits."""
    key_dtype, value_dtype = cache_dtype if isinstance(cache_dtype, tuple) else (cache_dtype, cache_dtype)
    rng = np.random.default_rng(page_size)
    num_pages, pages_per_row, num_kv, group, head_dim = 40, 8, 2, 3, 64
    shape = (2, num_pages, page_size, num_kv, head_dim)
    k_cache = stored(jnp.asarray(rng.standard_normal(shape), jnp.float32), storage_dtype(key_dtype))
    v_cache = stored(jnp.asarray(rng.standard_normal(shape), jnp.float32), storage_dtype(value_dtype))
    tables = rng.integers(1, num_pages, (70, pages_per_row)).astype(np.int32)
    keys = rng.integers(0, pages_per_row * page_size + 1, 70).astype(np.int32)  # 0: padding
    q = rng.standard_normal((70, num_kv, group, head_dim)).astype(np.float32)

    def attention(index):
        return [np.asarray(part) for part in ops.decode_attention(
            jnp.asarray(q[index]), k_cache, v_cache, 1, jnp.asarray(tables[index]), jnp.asarray(keys[index]))]

    alone = [attention(np.array([token])) for token in range(3)]
    for count in (1, 2, 7, 16, 33, 64):
        others = rng.choice(np.arange(3, 70), size=count - 1, replace=False)
        index = rng.permutation(np.concatenate([others, [count % 3]]))
        at = int(np.flatnonzero(index == count % 3)[0])
        got = attention(index)
        for part, expected in zip(got, alone[count % 3]):
            assert (part[at] == expected[0]).all(), f"among {count} tokens, {cache_dtype}, pages of {page_size}"


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("page_size", [8, 16, 128])
def test_a_prompt_chunk_s_tokens_are_the_same_bits_as_each_alone(page_size, cache_dtype):
    """The tokens of a prompt chunk share their row's pages, and the kernel widens each page
    once for a run of them (attention.cc `runs_of`): a token's attention is still the same
    bits alone, in a run of any length at any place, beside decode rows of other tables."""
    key_dtype, value_dtype = cache_dtype if isinstance(cache_dtype, tuple) else (cache_dtype, cache_dtype)
    rng = np.random.default_rng(page_size + 1)
    num_pages, pages_per_row, num_kv, group, head_dim = 60, 12, 2, 5, 64
    shape = (1, num_pages, page_size, num_kv, head_dim)
    k_cache = stored(jnp.asarray(rng.standard_normal(shape), jnp.float32), storage_dtype(key_dtype))
    v_cache = stored(jnp.asarray(rng.standard_normal(shape), jnp.float32), storage_dtype(value_dtype))
    chunk, start = 40, 3 * page_size // 2  # a chunk after a cached context ending mid-page
    table = rng.permutation(np.arange(1, num_pages))[:pages_per_row].astype(np.int32)
    others = rng.integers(1, num_pages, (3, pages_per_row)).astype(np.int32)
    tables = np.concatenate([np.tile(table, (chunk, 1)), others])
    keys = np.concatenate([start + 1 + np.arange(chunk), rng.integers(1, 4 * page_size, 3)]).astype(np.int32)
    q = rng.standard_normal((chunk + 3, num_kv, group, head_dim)).astype(np.float32)

    def attention(index):
        return [np.asarray(part) for part in ops.decode_attention(
            jnp.asarray(q[index]), k_cache, v_cache, 0, jnp.asarray(tables[index]), jnp.asarray(keys[index]))]

    alone = [attention(np.array([token])) for token in range(chunk)]
    # The whole chunk (runs of 16, 16 and 8), a decode row inside it, and a split chunk.
    orders = [np.arange(chunk + 3), np.r_[np.arange(7), chunk, np.arange(7, chunk), chunk + 1],
              np.r_[np.arange(20, chunk), chunk + 2, np.arange(20)]]
    for index in orders:
        got = attention(index)
        for at, token in enumerate(index):
            if token < chunk:
                for part, expected in zip(got, alone[token]):
                    assert (part[at] == expected[0]).all(), f"token {token} at {at}, {cache_dtype}, pages of {page_size}"


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
def test_decode_rows_of_ragged_lengths(cache_dtype):
    check_attention([(0, 1), (5, 1), (16, 1), (31, 1), (100, 1), (300, 1)], cache_dtype=cache_dtype)


@pytest.mark.parametrize("page_size", [8, 16, 32])
def test_decode_rows_on_page_edges(page_size):
    rows = [(page_size - 1, 1), (page_size, 1), (page_size + 1, 1), (3 * page_size, 1)]
    check_attention(rows, page_size=page_size, seed=page_size)


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("num_heads,num_kv,head_dim", [(9, 3, 64), (8, 2, 128), (4, 4, 32), (2, 1, 256)])
def test_query_groups_and_head_dims(num_heads, num_kv, head_dim, cache_dtype):
    check_attention([(3, 1), (21, 1), (70, 1)], num_heads=num_heads, num_kv=num_kv, head_dim=head_dim,
                    seed=num_heads, cache_dtype=cache_dtype)


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
def test_mixed_step_and_padding(cache_dtype):
    # Decode rows beside prompt chunks (their cached context through jnp, the step's own keys
    # through the step kernel), in a padded bucket.
    check_attention([(12, 1), (0, 9), (33, 1), (40, 6)], num_tokens=32, num_rows=8, seed=1, cache_dtype=cache_dtype)


@pytest.mark.parametrize("num_heads,num_kv,head_dim", [(9, 3, 64), (4, 4, 32), (2, 1, 256)])
def test_prompt_chunks_among_the_step_s_own_keys(num_heads, num_kv, head_dim):
    # Four prompts of a prefill bucket, each seeing only its own earlier tokens; one of 300
    # tokens, past the kernel's blocks of 256 keys; one after a cached context; padding.
    check_attention([(0, 128), (0, 7), (0, 300), (20, 50)], num_tokens=512, num_rows=4, num_heads=num_heads,
                    num_kv=num_kv, head_dim=head_dim, seed=head_dim)


def test_a_model_on_the_kernels_matches_the_model_on_jnp(monkeypatch):
    """Through ModelRunner, int8: a prompt in two chunks, then a decode. The kernels keep the
    tied embedding and head in int8 with a scale per 32 inputs, so jnp gets the same values,
    rounded; the kernels' products take their inputs in bfloat16, and their attention
    reads the step's keys from the cache, so jnp's do here too."""
    config = ModelConfig(vocab_size=64, hidden_size=128, intermediate_size=192, num_layers=3, num_heads=4,
                         num_kv_heads=2, head_dim=32)
    params = random_params(config, seed=3)
    native_logits, runner = chunked_prompt_logits(config, "auto", params, quantization="int8", cpu_kernels="native")
    assert (runner.cpu_kernels, runner.attention) == ("native", NATIVE_CPU)
    head = ops.unpacked(runner.state["embed"])
    assert head.values.dtype == jnp.int8 and head.values.shape[-1] // head.scales.shape[-1] == HEAD_GROUP_SIZE
    # auto: keys in bfloat16 and values in float8 under the kernels with int8 weights; jnp
    # asked for the same.
    assert runner.kv_cache_dtype == "float8_values"
    assert (runner.kv_cache.k.dtype, runner.kv_cache.v.dtype) == (jnp.bfloat16, jnp.uint8)  # float8's bytes
    float_linear, float_attention = layers.linear, attention.reference_attention

    def rounded_linear(x, weight):
        return float_linear(in_bfloat16(x).astype(x.dtype), weight)

    def attention_on_cached_keys(q, k, v, k_cache, v_cache, *rest, **features):
        k, v = (readable(stored(a, cache.dtype)).astype(a.dtype) for a, cache in ((k, k_cache), (v, v_cache)))
        return float_attention(q, k, v, k_cache, v_cache, *rest, **features)

    for module in (layers, llama):
        monkeypatch.setattr(module, "linear", rounded_linear)
    monkeypatch.setattr(attention, "reference_attention", attention_on_cached_keys)
    jnp_logits, runner = chunked_prompt_logits(config, "auto", served_head(runner, params), quantization="int8",
                                               cpu_kernels="jnp", kv_cache_dtype="float8_values")
    assert runner.state["embed"].dtype == jnp.float32
    assert (runner.cpu_kernels, runner.attention) == ("jnp", REFERENCE)
    # Where the two paths' float32 sums differ in their last bit right at a bfloat16 rounding
    # boundary, an input rounds the other way, a bfloat16 step (2^-8 of it) apart, and the
    # attention carries that to every later token: about 0.01 here, on logits of spread 1.
    # (A layer read wrongly: the whole spread.)
    np.testing.assert_allclose(native_logits, jnp_logits, rtol=0, atol=2e-2)
    assert (native_logits.argmax(-1) == jnp_logits.argmax(-1)).all()


def test_native_attention_is_refused_where_it_cannot_serve():
    with pytest.raises(ValueError, match="native_cpu"):
        choose(NATIVE_CPU, "float32", 64, 4, 2, 16, native=False)
    with pytest.raises(ValueError, match="native_cpu"):
        choose(NATIVE_CPU, "bfloat16", 64, 4, 2, 16, native=True)
    # A sliding window or soft-capping: the reference, which has both.
    assert choose("auto", "float32", 64, 4, 2, 16, plain=False, native=True).in_use == REFERENCE
    # A float8 cache: the GPU and TPU kernels read none, asked for by name.
    for kernel in ("mosaic_gpu", "ragged_tpu"):
        with pytest.raises(ValueError, match="float8"):
            choose(kernel, "bfloat16", 64, 4, 2, 16, float8_cache=True)
    assert choose("auto", "float32", 64, 4, 2, 16, native=True, float8_cache=True).in_use == NATIVE_CPU


def test_every_float8_value_comes_back_exactly_from_the_kernel():
    """One cached key: the attention's output is its value, every float8_e4m3fn bit pattern
    but NaN's, subnormals included (XLA's threads read float32 subnormals as zero, so the
    kernel must not build them)."""
    patterns = np.arange(256, dtype=np.uint8)
    v_cache = np.zeros((1, 2, 16, 1, 256), np.uint8)  # a float8 cache holds the bytes (kv_cache.FLOAT8_BYTES)
    v_cache[0, 1, 0, 0] = patterns
    q = jnp.ones((1, 1, 1, 256), jnp.float32)
    _, normaliser, weighted = ops.decode_attention(q, jnp.zeros_like(v_cache), jnp.asarray(v_cache), 0,
                                                   jnp.asarray([[1]], jnp.int32), jnp.asarray([1], jnp.int32))
    got = np.asarray(weighted[0, 0, 0] / normaliser[0, 0, 0])
    expected = np.asarray(jax.lax.bitcast_convert_type(jnp.asarray(patterns), jnp.float8_e4m3fn).astype(jnp.float32))
    finite = ~np.isnan(expected)
    assert finite.sum() == 254 and (expected[finite][1:8] > 0).all()  # the subnormals are in it
    np.testing.assert_array_equal(got[finite], expected[finite])


def test_cpu_kernels_native_fails_by_name_off_a_cpu_or_on_a_mesh():
    assert native.resolve("auto", "gpu") == native.JNP
    assert native.resolve("auto", "cpu", mesh_size=2) == native.JNP
    with pytest.raises(ValueError, match="the backend is gpu"):
        native.resolve("native", "gpu")
    with pytest.raises(ValueError, match="cpu_kernels must be one of"):
        EngineConfig(cpu_kernels="fast")


def test_a_hidden_library_falls_back_to_jnp():
    """FLINT_NATIVE_CPU=0 stands for a machine where the library was not built: auto is jnp
    and the attention the reference; native asked for by name is refused."""
    script = (
        "from engine.device import native\n"
        "assert not native.available()\n"
        "assert native.resolve('auto', 'cpu') == 'jnp'\n"
        "try:\n"
        "    native.resolve('native', 'cpu')\n"
        "except ValueError as error:\n"
        "    assert 'not built' in str(error)\n"
        "else:\n"
        "    raise AssertionError('native resolved without the library')\n")
    env = {"FLINT_NATIVE_CPU": "0", "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)


def test_the_cache_is_float8_values_by_default_only_under_the_kernels_with_int8_weights():
    import dataclasses

    from engine.device.kv_cache import kv_cache_dtype

    served = EngineConfig(dtype="float32", quantization="int8")
    assert kv_cache_dtype(served, native_cpu=True) == "float8_values"
    assert kv_cache_dtype(served, native_cpu=False) == "float32"  # the jnp path: as before
    assert kv_cache_dtype(dataclasses.replace(served, quantization="none"), native_cpu=True) == "float32"
    assert kv_cache_dtype(dataclasses.replace(served, dtype="bfloat16", quantization="none"), False) == "bfloat16"
    assert kv_cache_dtype(dataclasses.replace(served, kv_cache_dtype="float32"), native_cpu=True) == "float32"
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig(kv_cache_dtype="int4")


def resident_mib(array) -> float:
    """The MiB of the array's own pages in memory (/proc/self/pagemap's present bit). The
    process's total would count any program's temporaries too: reading the cache through
    the persistent compile cache's program of `jnp.any(cache != 0)` holds a 32 MiB mask."""
    page = os.sysconf("SC_PAGE_SIZE")
    start = array.unsafe_buffer_pointer()
    first, last = start // page, (start + array.nbytes - 1) // page
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = np.frombuffer(pagemap.read((last - first + 1) * 8), np.uint64)
    return int(np.count_nonzero(entries >> np.uint64(63))) * page / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/pagemap")
def test_native_zeros_take_memory_only_where_written():
    """The KV cache's start (zeros.cc): zeros, 64 MiB of which hold under 8 MiB until written,
    and a write (donated, in place) makes resident only the pages it touches. The values are
    read last: a read maps the kernel's shared zero page, which counts as present."""
    shape = (64, 1024, 512)  # bfloat16: 64 MiB
    cache = jax.jit(lambda: ops.zeros(shape, jnp.bfloat16))()
    cache.block_until_ready()
    assert resident_mib(cache) < 8
    address = cache.unsafe_buffer_pointer()
    cache = jax.jit(lambda c: c.at[3, 7].set(1.0), donate_argnums=(0,))(cache)
    cache.block_until_ready()
    assert cache.unsafe_buffer_pointer() == address and resident_mib(cache) < 16
    assert int(jnp.count_nonzero(cache)) == 512 and float(jnp.sum(cache.astype(jnp.float32))) == 512.0


@pytest.mark.parametrize("shape", [(3,), (1000,), (1025,), (4096, 3), (300, 4096)])
def test_native_zeros_zero_memory_that_held_other_values(shape):
    """Zeros wherever XLA's allocation comes from (a small one from the heap, not fresh
    pages): here the result aliases a buffer of ones, donated, which the kernel zeroes in
    place: the partial pages at either end by hand, the whole ones handed back."""
    def zeroed(ones):
        out = jax.ShapeDtypeStruct(shape, jnp.float32)
        return jax.ffi.ffi_call("flint_zeros", out, input_output_aliases={0: 0})(ones)

    ones = jnp.ones(shape, jnp.float32)
    address = ones.unsafe_buffer_pointer()
    zeros = jax.jit(zeroed, donate_argnums=(0,))(ones)
    assert zeros.unsafe_buffer_pointer() == address  # the very memory that held the ones
    np.testing.assert_array_equal(np.asarray(zeros), np.zeros(shape, np.float32))


def test_the_runner_s_cache_starts_as_zeros_on_both_paths():
    from engine.device.kv_cache import init_kv_cache
    from engine.device.sharding import make_mesh

    config = ModelConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=16)
    engine = EngineConfig(max_model_len=64, max_num_seqs=2, page_size=8, num_pages=600)
    mesh = make_mesh(engine)
    for native_zeros in (True, False):
        cache = init_kv_cache(config, engine, mesh, dtype="bfloat16", native=native_zeros)
        assert cache.k.shape == (2, 600, 8, 2, 16) and cache.k.dtype == jnp.bfloat16
        assert not bool(jnp.any(cache.k != 0)) and not bool(jnp.any(cache.v != 0))
