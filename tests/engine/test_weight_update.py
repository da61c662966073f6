"""New weights in a running engine (engine/residency.py, engine/device/weight_update.py), on
`flint serve`'s CPU defaults (int8 weights through the native kernels, the float8_values
cache): they serve exactly as an engine started on them does, in either form a trainer
holds them, with no program compiled after the first update, the prefix cache reset, a
mismatch refused by name; sleep releases and wake restores."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from loader_files import hf_tensors, write_hf

from engine.config import EngineConfig
from engine.device.compile_cache import CompileCounter
from engine.device.multihost import replay
from engine.device.runner import ModelRunner
from engine.engine import Engine
from engine.loader.named_weights import named_of
from engine.residency import EngineAsleepError
from flint import LLM, SamplingParams
from tiny_models import tiny_checkpoint

CONFIG = EngineConfig(max_model_len=128, max_num_seqs=8, max_num_batched_tokens=64, page_size=4, num_pages=160,
                      token_buckets=(8, 64), quantization="int8")
# Long enough for the prefix cache to hold pages of them between generations.
PROMPTS = ["The capital of France is a city of many", [5, 17, 99, 3, 44, 8, 71, 30, 2, 9, 64]]
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=0)


def engine_on(checkpoint, tokenizer) -> Engine:
    params = {**checkpoint.params, "layers": dict(checkpoint.params["layers"])}  # the runner takes what it stores
    engine = Engine(dataclasses.replace(checkpoint, params=params), tokenizer, CONFIG)
    engine.runner.warmup(buckets=engine.runner.essential_buckets())
    return engine


@pytest.fixture(scope="module")
def models(smollm2_tokenizer):
    """Two tiny random models: `llm` serves the first, `fresh` an engine started on the second."""
    first, second = (tiny_checkpoint(smollm2_tokenizer.vocab_size, seed) for seed in (0, 1))
    llm, fresh = (LLM.from_engine(engine_on(checkpoint, smollm2_tokenizer)) for checkpoint in (first, second))
    assert llm.engine.runner.kv_cache_dtype == "float8_values" and llm.engine.runner.cpu_kernels == "native"
    return llm, fresh, first, second


def outputs(llm: LLM, reset: bool = True) -> list[tuple[list[int], list[float]]]:
    """Greedy tokens and logprobs, the prompts computed afresh where `reset` (the prefix
    cache's hits move logprobs by a few thousandths of a nat on these defaults)."""
    if reset:
        llm.reset_prefix_cache()
    results = [result.outputs[0] for result in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    return [(out.token_ids, [step[token].logprob for token, step in zip(out.token_ids, out.logprobs)])
            for out in results]


def test_new_weights_serve_exactly_as_an_engine_started_on_them(models):
    llm, fresh, first, second = models
    before, expected = outputs(llm), outputs(fresh)
    assert before != expected
    llm.update_weights(jax.device_put(second.params))  # the loader's tree, as a trainer in JAX holds it
    assert outputs(llm, reset=False) == expected and llm.weights_version == 1  # the update reset the cache
    with CompileCounter() as compiled:
        llm.update_weights(named_of(first.config, first.params))  # the checkpoint's own names
        assert outputs(llm) == before
        llm.update_weights(hf_tensors(second.config, second.params))  # named independently (tests/loader_files.py)
        assert outputs(llm) == expected
        llm.update_weights(second.params)
    assert compiled.compiled + compiled.loaded == 1, compiled.describe()  # the names' relayout, at its first use; no step program
    assert llm.weights_version == 4


def test_without_the_prefix_cache_s_reset_the_old_weights_kv_would_be_read(models, monkeypatch):
    """The positive control of the reset: the prompts' pages are cached, and kept, they
    change what the new weights produce."""
    llm, fresh, first, second = models
    llm.update_weights(first.params)
    before, expected = outputs(llm), outputs(fresh)
    monkeypatch.setattr(llm.engine.block_manager, "reset_prefix_cache", lambda: None)
    llm.update_weights(second.params)
    assert outputs(llm, reset=False)[0][0] != expected[0][0]
    monkeypatch.undo()
    llm.update_weights(first.params)
    assert outputs(llm) == before


@pytest.mark.parametrize("change, message", [
    (lambda named: named.pop("model.layers.1.mlp.up_proj.weight"), "lack tensor model.layers.1.mlp.up_proj.weight"),
    (lambda named: named.update({"model.layers.0.mlp.bias": np.zeros(4, np.float32)}),
     "tensor model.layers.0.mlp.bias, which this model does not use"),
    (lambda named: named.update({"model.norm.weight": np.ones(7, np.float32)}),
     r"model.norm.weight has shape \(7,\), expected \(32,\)"),
    (lambda named: named.update({"model.embed_tokens.weight": named["model.embed_tokens.weight"].astype(np.int32)}),
     "model.embed_tokens.weight has dtype int32"),
])
def test_a_mismatch_is_refused_by_name_and_the_weights_stay(models, change, message):
    llm, _, first, _ = models
    llm.update_weights(first.params)
    version, before = llm.weights_version, outputs(llm)
    named = hf_tensors(first.config, first.params)
    change(named)
    with pytest.raises(ValueError, match=message):
        llm.update_weights(named)
    assert llm.weights_version == version and outputs(llm) == before


def test_sleep_releases_memory_and_wake_restores_the_same_outputs(models, tmp_path):
    llm, _, first, second = models
    folder = write_hf(tmp_path / "second", second.config, second.params, "llama")
    llm.update_weights(path=folder)
    expected = outputs(llm)
    for level in (1, 2):
        llm.sleep(level)
        assert llm.is_sleeping and llm.engine.runner.kv_cache is None
        with pytest.raises(EngineAsleepError):
            llm.generate(PROMPTS, GREEDY, use_tqdm=False)
        assert all(leaf.is_deleted() for leaf in jax.tree.leaves(llm.engine.runner.state["layers"]["wqkv"])) == (level == 2)
        llm.wake_up()  # level 2: the weights read again from the folder they came from
        assert not llm.is_sleeping and outputs(llm) == expected
    llm.update_weights(first.params)
    llm.sleep(2)
    with pytest.raises(ValueError, match="given as arrays"):
        llm.wake_up()
    llm.update_weights(second.params)
    llm.wake_up()
    assert outputs(llm) == expected


def test_a_multi_host_follower_replays_the_leader_s_weights_and_sleep(models, tmp_path):
    """The leader's runner publishes a folder update and the releases (engine/device/
    residency.py); a follower's runner replaying them holds the very same state. Arrays given
    in the leader's process are refused: they would never reach the followers."""
    _, _, first, second = models
    folder = write_hf(tmp_path / "second", second.config, second.params, "llama")
    leader, follower = (ModelRunner(first.config, dataclasses.replace(CONFIG, quantization="int8"),
                                    {**first.params, "layers": dict(first.params["layers"])}) for _ in range(2))
    published = []
    leader.publish = published.append
    leader.load_weights(str(folder))
    leader.release_kv_cache()
    leader.restore_kv_cache()
    with pytest.raises(ValueError, match="by path"):
        leader.replace_weights(first.params)
    assert [operation[0] for operation in published] == ["load_weights", "release_kv_cache", "restore_kv_cache"]
    state = {}
    for operation in published:
        replay(follower, operation, state)
    for mine, theirs in zip(jax.tree.leaves(leader.state), jax.tree.leaves(follower.state), strict=True):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    assert follower.kv_cache is not None
