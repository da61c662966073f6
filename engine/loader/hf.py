"""Hugging Face checkpoints: config.json to a ModelConfig, safetensors to the weights pytree.

A directory holds either one `model.safetensors` or shards listed in
`model.safetensors.index.json`. Weights are read one tensor at a time from the files mapped
(engine/loader/mapped.py), widened to float32 and stacked over layers; PyTorch's [out, in]
is already the layout of engine/models/params.py. A checkpoint published in FP8 keeps its
projections' own values and scales (engine/loader/fp8_checkpoint.py).
Every tensor in the files must be used: an unexpected one (an o_proj
bias, say) means a model this engine would run wrongly, so it is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from engine.config import LINEAR, LLAMA3, ModelConfig, RopeScaling
from engine.loader.fp8_checkpoint import Fp8Scheme, fp8_weight, fp8_scheme, scale_name, scheme_of
from engine.loader.mapped import mapped_tensors
from engine.models import family_for_hf, family_of
from engine.models.params import param_specs
from engine.loader.progress import WEIGHTS, Progress, StageCount


def config_from_hf(config_json: dict) -> ModelConfig:
    """The ModelConfig of a Hugging Face `config.json`; ValueError for what Flint cannot run.

    The shared fields are read here; the family (engine/models/) adds or overrides its own."""
    c = config_json
    family, architecture = family_for_hf(c.get("architectures") or [])
    fp8_scheme(c)  # a quantization Flint cannot read is refused here, by name
    hidden, num_heads = c["hidden_size"], c["num_attention_heads"]
    rope = c.get("rope_parameters") or {}  # transformers 5 moved rope settings here
    shared = dict(
        vocab_size=c["vocab_size"],
        hidden_size=hidden,
        intermediate_size=c["intermediate_size"],
        num_layers=c["num_hidden_layers"],
        num_heads=num_heads,
        num_kv_heads=c.get("num_key_value_heads") or num_heads,
        head_dim=c.get("head_dim") or hidden // num_heads,
        rms_norm_eps=c.get("rms_norm_eps", 1e-6),
        rope_theta=float(rope.get("rope_theta", c.get("rope_theta", 10000.0))),
        rope_scaling=_rope_scaling(c.get("rope_scaling") or rope or None),
        max_position_embeddings=int(c.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
        bos_token_id=c.get("bos_token_id"),
        eos_token_ids=_token_ids(c.get("eos_token_id")),
        family=family.name,
    )
    return ModelConfig(**{**shared, **family.hf_features(c, architecture)})


def _rope_scaling(scaling: dict | None) -> RopeScaling | None:
    if not scaling:
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        return None
    if kind == LINEAR:  # positions divided by factor
        return RopeScaling(factor=float(scaling["factor"]), kind=LINEAR)
    if kind != LLAMA3:
        raise ValueError(f"unsupported rope scaling type {kind!r}; Flint supports 'llama3' and 'linear'")
    return RopeScaling(
        factor=float(scaling["factor"]),
        low_freq_factor=float(scaling["low_freq_factor"]),
        high_freq_factor=float(scaling["high_freq_factor"]),
        original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
    )


def _token_ids(value: int | list[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return (int(value),) if isinstance(value, int) else tuple(int(v) for v in value)


def load_hf_config(directory: str | Path) -> ModelConfig:
    """The ModelConfig of the Hugging Face directory `directory`."""
    return config_from_hf(json.loads((Path(directory) / "config.json").read_text()))


def load_hf_params(directory: str | Path, config: ModelConfig, progress: Progress | None = None) -> dict:
    """The float32 weights pytree (engine/models/params.py layout) from `directory`'s
    safetensors; `progress` is told each tensor read (engine/loader/progress.py)."""
    files = _tensor_files(Path(directory))
    prefix = bare_model_prefix(files)
    files = {prefix + name: path for name, path in files.items()}
    scheme = scheme_of(directory)
    _refuse_unused(files, config, scheme)
    # Out of every tensor in the files: a tied checkpoint's copy of the embedding and the
    # ignored ones are not read, and count as done at the end.
    count = StageCount(progress, WEIGHTS, len(files))
    views = {}
    for path in set(files.values()):
        views.update({prefix + name: view for name, view in mapped_tensors(path)[1].items()})

    def tensor(name: str) -> np.ndarray:
        if name not in views:
            raise ValueError(f"checkpoint lacks tensor {name}")
        count.advance()
        return views[name]

    def read(name: str):
        """A float32 array, or the checkpoint's own FP8 where the tensor has a scale."""
        if scheme is not None and scale_name(name, scheme) in views:
            return fp8_weight(name, np.array(tensor(name)), tensor(scale_name(name, scheme)), scheme)
        return np.array(tensor(name), np.float32)

    params = _read_params(read, config)
    count.finish()
    return params


def _read_params(read, config: ModelConfig) -> dict:
    names = family_of(config).hf_tensors
    specs = param_specs(config)
    params = {name: read(names.top[name]) for name in specs if name != "layers"}
    params["layers"] = {name: names.stacked(read, name, config) for name in specs["layers"]}
    return params


def bare_model_prefix(files: dict[str, Path]) -> str:
    """"model." where the tensors are named as the bare model saves them (Qwen3Model, an
    embedder's checkpoint: `embed_tokens.weight`, `layers.0....`), for the causal LM's names."""
    return "model." if "embed_tokens.weight" in files and "model.embed_tokens.weight" not in files else ""


def _refuse_unused(files: dict[str, Path], config: ModelConfig, scheme: Fp8Scheme | None) -> None:
    family = family_of(config)
    # A tied checkpoint may still carry lm_head.weight (a copy of the embedding): harmless.
    expected = family.hf_tensors.expected(param_specs(config)["layers"], config)
    if scheme is not None:  # any weight may carry its scale
        expected |= {scale_name(name, scheme) for name in expected}
    unused = sorted(n for n in files if n not in expected and not n.endswith(family.hf_ignored_suffixes))
    if unused:
        raise ValueError(f"checkpoint has tensors this model does not use: {', '.join(unused[:5])}")


def _tensor_files(directory: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: directory / file for name, file in weight_map.items()}
    single = directory / "model.safetensors"
    if not single.is_file():
        raise ValueError(f"{directory} holds neither {single.name} nor {index.name}")
    return {name: single for name in mapped_tensors(single)[1]}
