"""engine/loader: Hugging Face, GGUF and Orbax checkpoints to the weights pytree, and back."""

from __future__ import annotations

import json

import gguf
import jax
import ml_dtypes
import numpy as np
import pytest
from loader_files import hf_config_json, llama_cpp_permute, write_gguf, write_hf

from engine.config import ModelConfig, RopeScaling
from engine.loader.checkpoint import load_checkpoint
from engine.loader.gguf import config_from_gguf, unpermute_rows
from engine.loader.hf import config_from_hf
from engine.loader.orbax import restore_orbax, save_orbax
from engine.loader.source import resolve_model
from engine.models.params import check_params, random_params

Q = gguf.GGMLQuantizationType
TINY = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
            num_kv_heads=2, head_dim=8, rms_norm_eps=1e-5, max_position_embeddings=512,
            bos_token_id=1)
CONFIGS = {
    "llama": ModelConfig(**TINY, rope_theta=500000.0, eos_token_ids=(2, 3),
                         rope_scaling=RopeScaling(8.0, 1.0, 4.0, 64)),
    "qwen2": ModelConfig(**TINY, family="qwen2", rope_theta=1e6, attention_bias=True, tie_word_embeddings=True,
                         eos_token_ids=(2,)),
    # head_dim 16 is not hidden / heads, as in Qwen3 itself
    "qwen3": ModelConfig(**{**TINY, "head_dim": 16}, family="qwen3", rope_theta=1e6, qk_norm=True,
                         eos_token_ids=(2,)),
}


def flat(params: dict) -> dict:
    out = {k: v for k, v in params.items() if k != "layers"}
    out.update({f"layers/{k}": v for k, v in params["layers"].items()})
    return out


def assert_params_equal(actual: dict, expected: dict, **tolerance) -> None:
    actual, expected = flat(actual), flat(expected)
    assert sorted(actual) == sorted(expected)
    for name in expected:
        assert actual[name].dtype == np.float32, name
        np.testing.assert_allclose(np.asarray(actual[name]), expected[name], err_msg=name,
                                   **tolerance)


# --- Hugging Face -------------------------------------------------------------------------


@pytest.mark.parametrize("arch", CONFIGS)
@pytest.mark.parametrize("dtype,num_shards",
                         [("float32", 1), ("float32", 3), ("bfloat16", 1), ("bfloat16", 2)])
def test_hf_checkpoint_loads_exactly(tmp_path, arch, dtype, num_shards):
    config = CONFIGS[arch]
    params = random_params(config, seed=1)
    write_hf(tmp_path / "model", config, params, arch, dtype=dtype, num_shards=num_shards)
    checkpoint = load_checkpoint(str(tmp_path / "model"))
    assert checkpoint.config == config
    assert checkpoint.source.format == "hf" and checkpoint.gguf_fields is None
    if dtype == "bfloat16":  # the file holds bf16: the loader must widen it without loss
        params = jax.tree.map(lambda v: v.astype(ml_dtypes.bfloat16).astype(np.float32), params)
    assert_params_equal(checkpoint.params, params, rtol=0, atol=0)


def test_hf_config_defaults_and_variants():
    base = hf_config_json(CONFIGS["llama"], "llama")
    for key in ("head_dim", "num_key_value_heads", "rope_scaling", "tie_word_embeddings"):
        del base[key]
    config = config_from_hf(base)
    assert (config.head_dim, config.num_kv_heads) == (8, 4)  # hidden / heads; heads
    assert config.rope_scaling is None and not config.tie_word_embeddings
    assert config_from_hf({**base, "eos_token_id": 7}).eos_token_ids == (7,)
    assert config_from_hf({**base, "eos_token_id": None}).eos_token_ids == ()
    assert config_from_hf({**base, "rope_scaling": {"rope_type": "default"}}).rope_scaling is None
    scaling = {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
    scaled = config_from_hf({**base, "rope_scaling": scaling})
    assert scaled.rope_scaling == RopeScaling(32.0, 1.0, 4.0, 8192)
    smollm2 = {**base, "architectures": ["LlamaForCausalLM"], "tie_word_embeddings": True}
    assert config_from_hf(smollm2).tie_word_embeddings


def test_hf_sliding_windows_per_layer():
    """Mistral windows every layer whenever sliding_window is set; Qwen only with
    use_sliding_window, from max_window_layers on; `layer_types` (transformers >= 4.53)
    says it per layer where a config has it. The context is not capped."""
    mistral = {**hf_config_json(CONFIGS["llama"], "mistral"), "max_position_embeddings": 32768}
    windowed = config_from_hf({**mistral, "sliding_window": 4096})
    assert windowed.layer_windows == (4096, 4096) and windowed.max_position_embeddings == 32768
    assert windowed.windowed(32768) and not windowed.windowed(4096)
    assert config_from_hf({**mistral, "sliding_window": None}).layer_windows == ()
    qwen2 = {**hf_config_json(CONFIGS["qwen2"], "qwen2"), "sliding_window": 64}
    assert config_from_hf({**qwen2, "use_sliding_window": False}).layer_windows == ()
    assert config_from_hf({**qwen2, "use_sliding_window": True, "max_window_layers": 1}).layer_windows == (0, 64)
    typed = {**qwen2, "layer_types": ["sliding_attention", "full_attention"]}
    assert config_from_hf(typed).layer_windows == (64, 0)


@pytest.mark.parametrize("change,message", [
    ({"architectures": ["GPT2LMHeadModel"]}, "unsupported architecture GPT2LMHeadModel"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling type 'yarn'"),
    ({"attention_bias": True}, "attention_bias"),
])
def test_hf_config_refuses_what_flint_cannot_run(change, message):
    with pytest.raises(ValueError, match=message):
        config_from_hf({**hf_config_json(CONFIGS["llama"], "llama"), **change})


def test_hf_missing_and_unexpected_tensors_are_named(tmp_path):
    config = CONFIGS["qwen3"]
    write_hf(tmp_path / "missing", config, random_params(config), "qwen3",
             skip=("model.layers.0.self_attn.k_norm.weight",))
    with pytest.raises(ValueError, match=r"lacks tensor model\.layers\.0\.self_attn\.k_norm\."):
        load_checkpoint(tmp_path / "missing")

    config, params = CONFIGS["llama"], random_params(CONFIGS["llama"])
    extra = {"model.layers.1.self_attn.o_proj.bias": np.zeros(32, np.float32),
             "model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(4, np.float32)}  # ignored
    write_hf(tmp_path / "extra", config, params, "llama", extra=extra)
    unused = r"does not use: model\.layers\.1\.self_attn\.o_proj\.bias$"  # inv_freq is ignored
    with pytest.raises(ValueError, match=unused):
        load_checkpoint(tmp_path / "extra")


# --- GGUF ---------------------------------------------------------------------------------


def test_llama_cpp_permutation_is_undone():
    rows = np.arange(4 * 8 * 3).reshape(4 * 8, 3)
    assert not np.array_equal(llama_cpp_permute(rows, 4), rows)
    np.testing.assert_array_equal(unpermute_rows(llama_cpp_permute(rows, 4), 4), rows)
    np.testing.assert_array_equal(unpermute_rows(llama_cpp_permute(rows[:, 0], 4), 4), rows[:, 0])


def q8_0_tolerance(array: np.ndarray) -> float:
    # Q8_0: 32-value blocks scaled by max|x| / 127 (in float16), values rounded to integers.
    return float(np.abs(array).max()) / 200


@pytest.mark.parametrize("arch", CONFIGS)
@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.Q8_0])
def test_gguf_checkpoint_loads(tmp_path, arch, qtype):
    # GGUF carries Llama 3 scaling as rope_freqs, and names one EOS.
    config = CONFIGS[arch].replace(rope_scaling=None, eos_token_ids=(2,))
    params = random_params(config, seed=2)
    path = write_gguf(tmp_path / "tiny.gguf", config, params, arch, qtype=qtype)
    checkpoint = load_checkpoint(path)
    assert checkpoint.config == config
    assert checkpoint.gguf_fields["general.architecture"].contents() == arch
    if qtype == Q.F32:
        assert_params_equal(checkpoint.params, params, rtol=0, atol=0)
        return
    for name, expected in flat(params).items():
        actual = flat(checkpoint.params)[name]
        if expected.ndim == 1 or (name.startswith("layers/") and expected.ndim == 2):
            np.testing.assert_array_equal(actual, expected, err_msg=name)  # vectors stay F32
        elif qtype == Q.F16:
            f16 = expected.astype(np.float16).astype(np.float32)
            np.testing.assert_array_equal(actual, f16, err_msg=name)
        else:
            np.testing.assert_allclose(actual, expected, atol=q8_0_tolerance(expected), err_msg=name)


def test_gguf_rope_freqs_become_rope_freq_factors(tmp_path):
    config = CONFIGS["llama"].replace(rope_scaling=None, eos_token_ids=(2,))
    params = random_params(config)
    factors = np.linspace(1.0, 8.0, config.head_dim // 2, dtype=np.float32)
    path = write_gguf(tmp_path / "l31.gguf", config, params, "llama",
                      extra={"rope_freqs.weight": factors})
    checkpoint = load_checkpoint(path)
    np.testing.assert_array_equal(checkpoint.params["rope_freq_factors"], factors)


def test_gguf_refuses_unknown_architecture_and_names_missing_tensors(tmp_path):
    config = CONFIGS["llama"].replace(rope_scaling=None)
    params = random_params(config)
    path = write_gguf(tmp_path / "gpt2.gguf", config, params, "gpt2")
    reader = gguf.GGUFReader(str(path))
    with pytest.raises(ValueError, match="unsupported GGUF architecture 'gpt2'"):
        config_from_gguf(reader.fields, [t.name for t in reader.tensors])
    path = write_gguf(tmp_path / "short.gguf", config, params, "llama",
                      skip=("blk.1.ffn_up.weight",))
    with pytest.raises(ValueError, match=r"lacks tensor blk\.1\.ffn_up\.weight"):
        load_checkpoint(path)


def test_embedded_smollm2_gguf_loads(smollm2_checkpoint):
    checkpoint = smollm2_checkpoint  # load_checkpoint(None), shared with the other engine tests
    assert checkpoint.source.id == "SmolLM2-135M-Instruct"
    c = checkpoint.config
    shape = (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim)
    assert shape == (30, 576, 9, 3, 64)
    assert (c.vocab_size, c.intermediate_size, c.max_position_embeddings) == (49152, 1536, 8192)
    assert c.tie_word_embeddings and "lm_head" not in checkpoint.params
    assert (c.rope_theta, c.rms_norm_eps) == (100000.0, 1e-5)
    assert (c.bos_token_id, c.eos_token_ids) == (1, (2,))
    check_params(c, checkpoint.params)
    assert len(checkpoint.gguf_fields["tokenizer.ggml.tokens"].data) == 49152
    # Dequantized Q4_1/Q8_0 weights of a trained model: finite, of plausible scale.
    for name, array in flat(checkpoint.params).items():
        assert array.dtype == np.float32 and np.isfinite(array).all(), name
        assert 1e-3 < np.abs(array).mean() < 10, name


# --- Orbax and conversion -----------------------------------------------------------------


def full_params(config: ModelConfig) -> dict:
    params = random_params(config, seed=3)
    params["rope_freq_factors"] = np.linspace(1.0, 4.0, config.head_dim // 2, dtype=np.float32)
    return params


def test_orbax_round_trip(tmp_path):
    config = CONFIGS["qwen2"].replace(rope_scaling=RopeScaling(8.0, 1.0, 4.0, 64), qk_norm=True)
    params = full_params(config)
    save_orbax(tmp_path / "ckpt", config, params)
    restored_config, restored = restore_orbax(tmp_path / "ckpt")
    assert restored_config == config
    assert all(isinstance(a, np.ndarray) for a in jax.tree.leaves(restored))
    assert_params_equal(restored, params, rtol=0, atol=0)
    assert restored["rope_freq_factors"].shape == (config.head_dim // 2,)
    with pytest.raises(FileExistsError):
        save_orbax(tmp_path / "ckpt", config, params)
    save_orbax(tmp_path / "ckpt", config, random_params(config, seed=4), overwrite=True)
    assert_params_equal(restore_orbax(tmp_path / "ckpt")[1], random_params(config, seed=4))


@pytest.mark.parametrize("as_function", [False, True])
def test_orbax_restores_onto_devices(tmp_path, monkeypatch, as_function):
    config = CONFIGS["llama"]
    params = full_params(config)
    monkeypatch.chdir(tmp_path)
    save_orbax("relative/ckpt", config, params)  # a relative path, which orbax alone refuses
    device = jax.devices("cpu")[-1]
    sharding = jax.sharding.SingleDeviceSharding(device)
    seen = []

    def shardings(c, abstract):
        seen.append((c, abstract["layers"]["wq"].shape))
        return jax.tree.map(lambda _: sharding, abstract)

    tree = shardings if as_function else jax.tree.map(lambda _: sharding, params)
    checkpoint = load_checkpoint("relative/ckpt", shardings=tree)
    assert checkpoint.source.format == "orbax" and checkpoint.config == config
    for array in jax.tree.leaves(checkpoint.params):
        assert isinstance(array, jax.Array) and array.devices() == {device}
    assert_params_equal(jax.tree.map(np.asarray, checkpoint.params), params, rtol=0, atol=0)
    assert seen == ([(config, (2, 32, 32))] if as_function else [])


def test_hf_checkpoint_is_placed_by_shardings(tmp_path):
    config = CONFIGS["qwen3"]
    params = random_params(config)
    write_hf(tmp_path / "m", config, params, "qwen3")
    sharding = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    checkpoint = load_checkpoint(tmp_path / "m",
                                 shardings=lambda c, p: jax.tree.map(lambda _: sharding, p))
    assert all(isinstance(a, jax.Array) for a in jax.tree.leaves(checkpoint.params))
    assert_params_equal(jax.tree.map(np.asarray, checkpoint.params), params, rtol=0, atol=0)


def test_convert_tool_writes_a_loadable_checkpoint(tmp_path, capsys):
    from tools.convert import main

    config = CONFIGS["qwen2"]
    params = random_params(config)
    source = write_hf(tmp_path / "hf", config, params, "qwen2", dtype="bfloat16")
    (source / "tokenizer.json").write_text("{}")
    assert main([str(source), str(tmp_path / "out")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert (tmp_path / "out" / "tokenizer.json").read_text() == "{}"
    assert resolve_model(tmp_path / "out").format == "orbax"
    converted = load_checkpoint(tmp_path / "out")
    assert converted.config == config
    assert_params_equal(converted.params, load_checkpoint(source).params, rtol=0, atol=0)

    gguf_path = write_gguf(tmp_path / "t.gguf", config, params, "qwen2", qtype=Q.Q8_0)
    assert main([str(gguf_path), str(tmp_path / "from_gguf")]) == 0
    stored = json.loads((tmp_path / "from_gguf" / "flint_config.json").read_text())
    assert stored["source"] == str(gguf_path.resolve())
    from_gguf = load_checkpoint(tmp_path / "from_gguf").params
    assert_params_equal(from_gguf, load_checkpoint(gguf_path).params, rtol=0, atol=0)


def test_gguf_tokenizer_is_written_as_hugging_face_files(tmp_path, smollm2_checkpoint):
    from engine.text.tokenizer import Tokenizer
    from tools.convert import write_gguf_tokenizer

    write_gguf_tokenizer(smollm2_checkpoint.gguf_fields, tmp_path)
    original = Tokenizer.from_gguf(smollm2_checkpoint.gguf_fields)
    written = Tokenizer.from_hf_directory(tmp_path)
    text = "Hello, world! 12345 <|im_start|>user\n  tabs\tand ünïcödé"
    assert written.encode(text) == original.encode(text)
    assert written.decode(original.encode(text)) == text
    for attribute in ("bos_token_id", "eos_token_ids", "pad_token_id", "chat_template", "vocab_size"):
        assert getattr(written, attribute) == getattr(original, attribute), attribute
    assert original.eos_token_ids == (2,) and original.chat_template
