"""`flint serve` flags to Settings, and the max_model_len actually served."""

from __future__ import annotations

import pytest
from tiny_models import tiny_checkpoint

from api.server.cli import build_parser, main
from api.server.serve import serve, settings_from_args
from api.server.settings import MIB, Settings
from engine.config import EngineConfig, default_num_pages


def parse(*flags: str) -> Settings:
    return settings_from_args(build_parser().parse_args(["serve", *flags]))


def test_defaults(monkeypatch):
    monkeypatch.delenv("FLINT_API_KEY", raising=False)
    settings = parse()
    engine = EngineConfig()
    assert settings.api_key is None and settings.max_waiting == 256
    assert settings.shutdown_timeout == 30 and settings.max_body_bytes == 16 * MIB
    assert settings.engine == EngineConfig(num_pages=default_num_pages(engine.max_model_len, engine.max_num_seqs,
                                                                       engine.page_size), quantization="auto")


def test_every_flag_reaches_the_settings(monkeypatch):
    monkeypatch.delenv("FLINT_API_KEY", raising=False)
    settings = parse("--model", "m.gguf", "--host", "0.0.0.0", "--port", "9000", "--api-key", "k",
                     "--max-waiting", "3", "--shutdown-timeout", "2.5", "--max-body-bytes", "1000",
                     "--max-model-len", "512", "--max-num-seqs", "4", "--max-num-batched-tokens", "32",
                     "--num-pages", "100", "--dtype", "bfloat16", "--quantization", "int8", "--no-prefix-caching",
                     "--allow-special-tokens-in-content", "--tensor-parallel-size", "2", "--attention", "reference",
                     "--layer-loop", "unrolled", "--cpu-kernels", "jnp", "--speculative", "ngram",
                     "--num-speculative-tokens", "5", "--kv-cache-dtype", "float32")
    assert settings == Settings(
        host="0.0.0.0", port=9000, model="m.gguf", api_key="k", max_waiting=3, shutdown_timeout=2.5,
        max_body_bytes=1000, allow_special_tokens_in_content=True, engine=EngineConfig(max_model_len=512, max_num_seqs=4, max_num_batched_tokens=32,
                                                 num_pages=100, dtype="bfloat16", quantization="int8",
                                                 kv_cache_dtype="float32",
                                                 enable_prefix_caching=False, mesh_shape=(2,),
                                                 attention="reference", layer_loop="unrolled", cpu_kernels="jnp",
                                                 speculative="ngram",
                                                 num_speculative_tokens=5))


def test_the_api_key_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("FLINT_API_KEY", "from-env")
    assert parse().api_key == "from-env"
    assert parse("--api-key", "from-flag").api_key == "from-flag"


def test_default_num_pages_fit_an_eighth_of_every_sequence_and_one_whole():
    assert default_num_pages(2048, 64, 16) == 64 * 128 // 8 + 1
    assert default_num_pages(256, 1, 16) == 16 + 1  # one full-length sequence at least
    EngineConfig(max_model_len=2048, max_num_seqs=1, max_num_batched_tokens=8,
                 num_pages=default_num_pages(2048, 1, 16))  # valid: EngineConfig checks the fit


@pytest.mark.parametrize("flags", [["--max-waiting", "-1"], ["--max-num-seqs", "0"], ["--dtype", "int4"],
                                   ["--tensor-parallel-size", "0"], ["--attention", "flash"], ["--layer-loop", "while"],
                                   ["--cpu-kernels", "fast"], ["--kv-cache-dtype", "int4"],
                                   ["--speculative", "eagle"], ["--num-speculative-tokens", "-1"]])
def test_bad_values_are_refused_by_the_parser(flags):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", *flags])
    assert exit_.value.code == 2


def test_contradicting_engine_flags_exit_2(capsys):
    args = build_parser().parse_args(["serve", "--max-num-seqs", "8", "--max-num-batched-tokens", "4"])
    assert serve(args) == 2
    assert "max_num_seqs" in capsys.readouterr().err


def test_max_model_len_is_capped_at_the_models_context():
    settings = Settings(engine=EngineConfig(max_model_len=4096, num_pages=2048))
    assert settings.served(8192) is settings
    assert settings.served(None) is settings
    assert settings.served(1024).engine.max_model_len == 1024
    assert settings.served(1024).engine.num_pages == 2048


def test_auto_dtype_is_float32_on_cpu_and_bfloat16_elsewhere(monkeypatch):
    import jax

    from engine.device.weights import resolve_dtype

    assert parse().engine.dtype == "auto"
    assert resolve_dtype("auto") == "float32" and jax.default_backend() == "cpu"
    assert resolve_dtype("float16") == "float16"
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert resolve_dtype("auto") == "bfloat16"


def test_a_mesh_larger_than_the_devices_names_the_tensor_parallel_size():
    import jax

    from engine.device.sharding import make_mesh

    size = len(jax.devices()) + 1
    with pytest.raises(ValueError, match=f"tensor-parallel size of {size} needs {size} devices"):
        make_mesh(EngineConfig(mesh_shape=(size,)))


def test_an_engine_left_on_auto_computes_and_caches_in_float32_on_cpu(smollm2_tokenizer):
    import jax.numpy as jnp

    from engine.engine import Engine

    config = EngineConfig(max_model_len=64, max_num_seqs=1, max_num_batched_tokens=4, num_pages=8)
    engine = Engine(tiny_checkpoint(smollm2_tokenizer.vocab_size), smollm2_tokenizer, config)
    assert config.dtype == "auto" and engine.config.dtype == "float32"
    assert engine.runner.kv_cache.k.dtype == jnp.float32
    assert "dtype float32" in engine.describe()


@pytest.mark.parametrize("command", [["serve"], ["generate", "Hello"]])
def test_a_tensor_parallel_size_beyond_the_devices_exits_2_naming_the_flag(command, capsys):
    import jax

    available = jax.device_count()
    # A model that is not there: without the check, the command would fail at once on that instead.
    flags = ["--tensor-parallel-size", str(available + 1), "--model", "/nonexistent/model.gguf",
             "--no-compilation-cache"]
    assert main([*command, *flags]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (f"flint: --tensor-parallel-size {available + 1} needs {available + 1} devices, "
                     f"and JAX sees {available} (cpu)")
