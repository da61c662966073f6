"""A model's served weights and description kept between starts (engine/loader/served_cache.py,
engine/loader/kept.py): a second start reads neither the checkpoint nor its header, and serves
exactly what the first made."""

from __future__ import annotations

import os
import shutil

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import engine.loader.serving as serving_module
import engine.loader.source as source_module
from engine.config import EngineConfig
from engine.device.runner import ModelRunner, RowPlan
from engine.device.sharding import make_mesh
from engine.device.integer_weight import Int8Weight
from engine.loader.serving import load_for_serving, served_config
from engine.loader import kept, served_cache
from engine.loader.mapped import mapped_tensors
from engine.loader.source import resolve_model

CONFIG = EngineConfig(max_model_len=64, max_num_seqs=2, max_num_batched_tokens=16, page_size=8, num_pages=24,
                      token_buckets=(1, 16), optimize_compiled_code=False, quantization="int8")


def leaves(tree) -> dict:
    return dict(served_cache._flatten(tree))


def refuse(*args, **kwargs):
    raise AssertionError("the checkpoint was read")


@pytest.fixture(scope="module")
def model_copy(tmp_path_factory):
    """The embedded GGUF copied, so that a test may change its modification time."""
    path = tmp_path_factory.mktemp("model") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    shutil.copyfile(resolve_model(None).path, path)
    return path


def test_a_second_start_reads_what_the_first_kept_and_not_the_checkpoint(model_copy, tmp_path, monkeypatch):
    mesh = make_mesh(CONFIG)
    source = resolve_model(str(model_copy))
    config = served_config(CONFIG, source)
    checkpoint, tokenizer, made = load_for_serving(source, config, mesh, tmp_path)
    assert checkpoint.params is None and made is not None  # made, kept, and the loaded params let go
    made = {key: np.asarray(value) for key, value in leaves(made).items()}
    assert "layers/wqkv/int8.values" in made and "embed" in made

    for name in ("load_checkpoint", "tokenizer_for"):
        monkeypatch.setattr(serving_module, name, refuse)
    monkeypatch.setattr(source_module, "_describe_gguf", refuse)
    again_source = resolve_model(str(model_copy), kept_in=tmp_path)
    assert again_source == source
    again, again_tokenizer, kept_weights = load_for_serving(again_source, config, mesh, tmp_path)
    assert again.config == checkpoint.config and again.params is None
    assert set(leaves(kept_weights)) == set(made)
    for key, value in leaves(kept_weights).items():
        assert value.dtype == made[key].dtype and np.array_equal(value, made[key]), key
    text = "Hello, world! 12 + 30 = 42"
    assert again_tokenizer.encode(text) == tokenizer.encode(text)
    assert (again_tokenizer.eos_token_ids, again_tokenizer.bos_token_id, again_tokenizer.chat_template) == (
        tokenizer.eos_token_ids, tokenizer.bos_token_id, tokenizer.chat_template)

    # The runner serves the kept weights as it served the made ones.
    prompt = tokenizer.encode(text)
    rows = [RowPlan(prompt, 0, list(range(1, 1 + -(-len(prompt) // CONFIG.page_size))))]
    from_kept = ModelRunner(again.config, config, None, mesh, served=kept_weights).hidden_logits(rows)
    from_made = ModelRunner(again.config, config, None, mesh, served=served_cache.load(
        served_cache.entry_path(tmp_path, source, config.dtype, config.quantization))).hidden_logits(rows)
    np.testing.assert_array_equal(from_kept, from_made)
    assert np.isfinite(from_kept).all()


def test_a_changed_file_is_read_again(model_copy, tmp_path):
    source = resolve_model(str(model_copy))
    config = served_config(CONFIG, source)
    load_for_serving(source, config, make_mesh(CONFIG), tmp_path)
    assert kept.load_description(tmp_path, model_copy) is not None
    before = served_cache.entry_path(tmp_path, source, config.dtype, config.quantization)
    stat = model_copy.stat()
    os.utime(model_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert kept.load_description(tmp_path, model_copy) is None
    assert served_cache.entry_path(tmp_path, source, config.dtype, config.quantization) != before
    assert served_cache.entry_path(tmp_path, source, "bfloat16", config.quantization) != served_cache.entry_path(
        tmp_path, source, config.dtype, config.quantization)


def test_served_weights_round_trip_and_a_cut_file_is_a_miss(tmp_path, caplog):
    rng = np.random.default_rng(0)
    weights = {"embed": rng.standard_normal((8, 4)).astype(ml_dtypes.bfloat16),
               "final_norm": jnp.asarray(rng.standard_normal(4), jnp.float32),
               "layers": {"wqkv": Int8Weight(values=rng.integers(-127, 128, (2, 6, 64), dtype=np.int8),
                                             scales=rng.random((2, 6, 1), dtype=np.float32)),
                          "attn_norm": rng.standard_normal((2, 4)).astype(np.float32)}}
    path = tmp_path / "w.safetensors"
    served_cache.save(path, weights)
    back = served_cache.load(path)
    assert isinstance(back["layers"]["wqkv"], Int8Weight)
    expected, actual = leaves(weights), leaves(back)
    assert set(actual) == set(expected)
    for key, value in expected.items():
        value = np.asarray(value)
        assert actual[key].dtype == value.dtype and np.array_equal(actual[key], value), key
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert served_cache.load(path) is None and "cannot be read" in caplog.text
    assert served_cache.load(tmp_path / "absent.safetensors") is None


def test_kept_weights_start_aligned_and_are_placed_without_a_copy(tmp_path):
    rng = np.random.default_rng(1)
    weights = {"layers": {"w": Int8Weight(values=rng.integers(-127, 128, (2, 64, 64), dtype=np.int8),
                                          scales=rng.random((2, 64, 2), dtype=np.float32))},
               "embed": rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)}
    # A 3-float tensor (12 bytes) written first puts what follows it off the alignment.
    odd = {"a_odd": rng.standard_normal(3).astype(np.float32), **weights}
    device = jax.devices("cpu")[0]
    for name, tree in (("even", weights), ("odd", odd)):
        path = tmp_path / f"{name}.safetensors"
        served_cache.save(path, tree)
        assert (8 + served_cache.header_text_length(path)) % served_cache.HOST_ALIGNMENT == 0
        _, views = mapped_tensors(path)
        aligned_in_place = sum(served_cache.is_aligned(view) for view in views.values())
        assert aligned_in_place == (len(views) if tree is weights else 1)  # the rest are copied, aligned
        back = leaves(served_cache.load(path))
        for key, expected in leaves(tree).items():
            assert np.array_equal(back[key], np.asarray(expected)), key
            assert served_cache.is_aligned(back[key]), key
            placed = jax.device_put(back[key], device)
            assert placed.unsafe_buffer_pointer() == back[key].ctypes.data, key  # the host memory itself

    back = leaves(served_cache.load(tmp_path / "even.safetensors"))
    back["layers/w/int8.values"][...] = 0  # the mapping is private: the file is never written
    assert np.array_equal(leaves(served_cache.load(tmp_path / "even.safetensors"))["layers/w/int8.values"],
                          leaves(weights)["layers/w/int8.values"])


def test_nothing_is_kept_over_several_devices_or_without_a_directory(model_copy, tmp_path):
    source = resolve_model(str(model_copy))
    config = served_config(CONFIG, source)
    assert served_cache.entry_for(None, source, config, make_mesh(CONFIG)) is None
    if len(jax.devices()) > 1:
        wide = make_mesh(EngineConfig(**{**vars(CONFIG), "mesh_shape": (2,)}))
        assert served_cache.entry_for(tmp_path, source, config, wide) is None


def test_old_entries_of_a_model_are_removed_when_a_new_one_is_kept(tmp_path):
    weights = {"embed": np.ones((2, 2), np.float32)}
    names = [f"Model-{index:032x}.safetensors" for index in range(4)]
    for index, name in enumerate(names):
        served_cache.save(tmp_path / name, weights)
        os.utime(tmp_path / name, ns=(index * 10**9, index * 10**9))
    served_cache.save(tmp_path / f"Model-v2-{0:032x}.safetensors", weights)  # another model
    served_cache.prune(tmp_path / names[1])  # the newest is the one just written, whatever the clock says
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([names[1], names[3], f"Model-v2-{0:032x}.safetensors"])
