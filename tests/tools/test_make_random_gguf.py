"""tools/make_random_gguf.py: a random Llama as an F16 GGUF with the embedded tokenizer,
the model issue 50's benchmarks measure at Llama-3.2-1B's shapes."""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from make_random_gguf import SHAPES, tensor_shapes, write_random_gguf  # noqa: E402

from engine.loader.checkpoint import load_checkpoint  # noqa: E402
from engine.loader.serving import tokenizer_for  # noqa: E402


def test_the_file_loads_as_its_shape_with_smollm2_s_tokenizer(tmp_path, smollm2_tokenizer):
    path = write_random_gguf(tmp_path / "tiny.gguf", SHAPES["tiny"], seed=3)
    types = {tensor.name: tensor.tensor_type for tensor in gguf.GGUFReader(str(path)).tensors}
    assert types["blk.1.ffn_down.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.1.ffn_norm.weight"] == gguf.GGMLQuantizationType.F32
    checkpoint = load_checkpoint(path)
    config, shape = checkpoint.config, SHAPES["tiny"]
    assert (config.hidden_size, config.intermediate_size, config.num_layers, config.num_heads, config.num_kv_heads,
            config.head_dim, config.tie_word_embeddings) == (shape.hidden, shape.intermediate, shape.layers,
                                                             shape.heads, shape.kv_heads, shape.head_dim, True)
    text = "The capital of France is Paris. <|im_start|>"
    tokenizer = tokenizer_for(checkpoint)
    assert tokenizer.encode(text) == smollm2_tokenizer.encode(text)
    assert tokenizer.chat_template == smollm2_tokenizer.chat_template
    w_up = checkpoint.params["layers"]["w_up"]
    assert abs(float(np.std(w_up)) * np.sqrt(shape.hidden) - 1.0) < 0.1  # scaled by 1/sqrt(fan-in)


def test_the_default_shape_is_llama_3_2_1b_s_size():
    count = sum(int(np.prod(dims)) for dims in tensor_shapes(SHAPES["llama-3.2-1b"], 49152).values())
    assert 1.05e9 < count < 1.1e9  # 0.97 B in the layers and 0.10 B of embedding (tied)


def test_llama_quantize_is_built_with_llama_server_and_writes_beside_its_source(tmp_path, monkeypatch):
    """tools/bench/llama_server.py: one build makes both targets; `quantized_gguf` runs the quantizer
    once, into NAME-Q4_K_M.gguf beside the source (here a stand-in that copies its input)."""
    import tools.bench.llama_server as llama_server

    (build,) = [command for command in llama_server.build_commands(tmp_path, 2) if "--build" in command]
    assert {"llama-server", "llama-quantize"} <= set(build)
    stand_in = tmp_path / "llama-quantize"
    stand_in.write_text('#!/bin/sh\ncp "$1" "$2"\necho "$3" >> "$2"\n')
    stand_in.chmod(0o755)
    runs = []
    monkeypatch.setattr(llama_server, "find_llama_quantize", lambda: runs.append(1) or stand_in)
    source = tmp_path / "llama-1b-f16.gguf"
    source.write_text("weights\n")
    for _ in range(2):
        quantized = llama_server.quantized_gguf(source)
    assert quantized.name == "llama-1b-Q4_K_M.gguf" and quantized.read_text() == "weights\nQ4_K_M\n"
    assert runs == [1]  # the second call found it
