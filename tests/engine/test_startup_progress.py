"""The engine's start-up progress (engine/loader/progress.py): the weights read, from each
checkpoint format and from the served weights an earlier start kept, then the buckets
compiled, each counted one by one from 0 up to its total, weights before buckets."""

from __future__ import annotations

import gguf
import jax
import numpy as np
import pytest
from loader_files import hf_tensors, write_gguf, write_hf
from safetensors import safe_open

from engine.config import EngineConfig, ModelConfig
from engine.device.sharding import make_mesh
from engine.device.weights import serving_weights
from engine.engine import Engine
from engine.loader import served_cache
from engine.loader.checkpoint import load_checkpoint
from engine.loader.orbax import save_orbax
from engine.loader.serving import load_for_serving, served_config
from engine.loader.source import resolve_model
from engine.models.params import random_params
from engine.loader.progress import BUCKETS, WEIGHTS
from tools.convert import write_gguf_tokenizer

TINY = ModelConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                   head_dim=8, max_position_embeddings=512, bos_token_id=1, eos_token_ids=(2,))
CONFIG = EngineConfig(max_model_len=64, max_num_seqs=2, max_num_batched_tokens=16, page_size=8, num_pages=24,
                      token_buckets=(1, 16), optimize_compiled_code=False)


class Events(list):
    """An engine `Progress` that keeps what it is told."""

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.append((stage, done, total))

    def of(self, stage: str) -> list[tuple[int, int]]:
        return [(done, total) for told, done, total in self if told == stage]


def one_by_one(total: int) -> list[tuple[int, int]]:
    return [(done, total) for done in range(total + 1)]


def tensors_in(path) -> int:
    with safe_open(str(path), framework="numpy") as file:
        return len(file.keys())


def test_a_gguf_file_counts_every_tensor_as_it_reads_it(tmp_path):
    path = write_gguf(tmp_path / "tiny.gguf", TINY, random_params(TINY), "llama", qtype=gguf.GGMLQuantizationType.Q8_0)
    events = Events()
    load_checkpoint(str(path), progress=events)
    total = len(gguf.GGUFReader(path).tensors)
    assert total == 2 * 9 + 3  # nine a layer; the embedding, the final norm and the output
    assert events == [(WEIGHTS, done, total) for done, total in one_by_one(total)]


def test_a_hugging_face_checkpoint_counts_the_tensors_it_skips_at_the_end(tmp_path):
    params = random_params(TINY)
    skipped = {"model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(4, np.float32)}  # recomputed, not read
    directory = write_hf(tmp_path / "tiny", TINY, params, "llama", num_shards=2, extra=skipped)
    events = Events()
    load_checkpoint(str(directory), progress=events)
    total = len(hf_tensors(TINY, params)) + 1
    assert events.of(WEIGHTS) == one_by_one(total) and len(events) == total + 1


def test_an_orbax_checkpoint_counts_its_weights_before_and_after_the_one_restore(tmp_path):
    params = random_params(TINY)
    save_orbax(tmp_path / "ckpt", TINY, params)
    events = Events()
    load_checkpoint(str(tmp_path / "ckpt"), progress=events)
    total = len(jax.tree.leaves(params))
    assert events == [(WEIGHTS, 0, total), (WEIGHTS, total, total)]


def test_kept_served_weights_count_every_tensor_read(tmp_path):
    path = tmp_path / "kept.safetensors"
    served_cache.save(path, serving_weights(TINY, random_params(TINY), "float32", "int8"))
    events = Events()
    assert served_cache.load(path, progress=events) is not None
    assert events.of(WEIGHTS) == one_by_one(tensors_in(path)) and len(events) == tensors_in(path) + 1


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_checkpoint):
    """A tiny random Llama with SmolLM2's tokenizer, as a Hugging Face directory."""
    directory = tmp_path_factory.mktemp("tiny")
    write_gguf_tokenizer(smollm2_checkpoint.gguf_fields, directory)
    config = TINY.replace(vocab_size=smollm2_checkpoint.config.vocab_size)
    return write_hf(directory, config, random_params(config), "llama")


def test_from_model_counts_the_weights_then_the_buckets_and_still_reports(tiny_model, tmp_path):
    events, reports = Events(), []
    Engine.from_model(str(tiny_model), CONFIG, report=reports.append, progress=events, kept_in=tmp_path)
    weights, buckets = events.of(WEIGHTS), events.of(BUCKETS)
    assert weights == one_by_one(tensors_in(tiny_model / "model.safetensors"))
    assert buckets == one_by_one(len(CONFIG.token_buckets))
    assert events == [(WEIGHTS, *told) for told in weights] + [(BUCKETS, *told) for told in buckets]
    assert any(report.startswith("compiled bucket 2/2: 16 tokens") for report in reports)

    # A second start reads the served weights the first kept, and counts those.
    source = resolve_model(str(tiny_model), kept_in=tmp_path)
    again = Events()
    checkpoint, _, served = load_for_serving(source, served_config(CONFIG, source), make_mesh(CONFIG), tmp_path,
                                             progress=again)
    assert served is not None and checkpoint.params is None
    kept = next(tmp_path.glob("*.safetensors"))
    assert again.of(WEIGHTS) == one_by_one(tensors_in(kept)) and len(again) == tensors_in(kept) + 1
