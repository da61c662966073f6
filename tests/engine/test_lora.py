"""LoRA adapters (engine/loader/lora.py, engine/device/lora.py, engine/host/adapters.py):
PEFT files read and refused as PEFT writes them, each adapted projection checked against
W + scale B A merged in NumPy (tests/lora_files.py, tests/numpy_reference.py), batches that
mix adapters and the base, slots evicted least recently used, and no KV shared across adapters."""

from __future__ import annotations

import json

import numpy as np
import pytest
from lora_files import merged_params, random_adapter, write_adapter
from numpy_reference import forward, greedy

from engine.config import LORA_TARGETS, EngineConfig
from engine.device.lora import check_fits
from engine.device.runner import ModelRunner, RowPlan
from engine.engine import Engine
from engine.host.request import BeamSearchParams, Request, SamplingParams, StopCriteria
from engine.loader.checkpoint import Checkpoint
from engine.loader.lora import load_lora
from engine.loader.source import ModelSource
from engine.models.params import random_params
from tiny_models import tiny_checkpoint

RANK = 4
LIMITS = dict(max_model_len=64, max_num_seqs=4, max_num_batched_tokens=32, page_size=4, num_pages=60,
              optimize_compiled_code=False)
PROMPT = [5, 17, 3, 60, 22, 9, 41, 8, 13]


@pytest.fixture(scope="module")
def base():
    return tiny_checkpoint(96, seed=5)


@pytest.fixture(scope="module")
def adapters(base, tmp_path_factory):
    """Three adapters: every projection (alpha 8), attention only with rsLoRA, and the MLP of
    layer 1 alone; with their merged weights."""
    root = tmp_path_factory.mktemp("adapters")
    made = {}
    specs = {"all": dict(targets=LORA_TARGETS, alpha=8.0, rslora=False, layers=None),
             "attn": dict(targets=("q_proj", "k_proj", "v_proj", "o_proj"), alpha=6.0, rslora=True, layers=None),
             "mlp1": dict(targets=("gate_proj", "up_proj", "down_proj"), alpha=4.0, rslora=False, layers=[1])}
    for seed, (name, spec) in enumerate(specs.items()):
        pairs = random_adapter(base.config, RANK, seed=10 + seed, targets=spec["targets"], layers=spec["layers"])
        write_adapter(root / name, pairs, RANK, spec["alpha"], rslora=spec["rslora"])
        scale = spec["alpha"] / (np.sqrt(RANK) if spec["rslora"] else RANK)
        made[name] = (load_lora(name, root / name, base.config), merged_params(base.params, pairs, scale))
    return made


def test_the_adapter_s_config_and_tensors_are_read(adapters):
    adapter, _ = adapters["attn"]
    assert adapter.rank == RANK and adapter.scale == pytest.approx(6.0 / 2.0)  # rsLoRA: alpha / sqrt(r)
    assert adapter.targets == ("q_proj", "k_proj", "v_proj", "o_proj")
    a, b = adapters["mlp1"][0].weights["down_proj"]
    assert not a[0].any() and a[1].any() and not b[0].any()  # layer 0 has no adapter: zeros


@pytest.mark.parametrize("layer_loop", ["scan", "unrolled"])  # the slots stacked, or one array per layer
def test_each_slot_s_logits_are_the_merged_weights_and_the_base_row_is_untouched(base, adapters, layer_loop):
    runner = ModelRunner(base.config, EngineConfig(**{**LIMITS, "max_num_batched_tokens": 64}, max_loras=3,
                                                   max_lora_rank=8, layer_loop=layer_loop), base.params)
    names = sorted(adapters)
    for slot, name in enumerate(names):
        runner.load_adapter(slot, adapters[name][0])
    rows = [RowPlan(PROMPT, 0, [1 + 3 * row, 2 + 3 * row, 3 + 3 * row], adapter_slot=slot)
            for row, slot in enumerate([*range(len(names)), -1])]
    logits = runner.hidden_logits(rows).reshape(len(rows), len(PROMPT), -1)
    for row, name in enumerate(names):
        expected = forward(base.config, adapters[name][1], PROMPT)
        np.testing.assert_allclose(logits[row], expected, atol=2e-5, err_msg=name)
        assert np.abs(expected - forward(base.config, base.params, PROMPT)).max() > 1e-2  # it changes the logits
    np.testing.assert_allclose(logits[-1], forward(base.config, base.params, PROMPT), atol=2e-5)


def test_a_cleared_slot_adds_nothing(base, adapters):
    runner = ModelRunner(base.config, EngineConfig(**LIMITS, max_loras=1), base.params)
    runner.load_adapter(0, adapters["all"][0])
    runner.load_adapter(0, None)
    logits = runner.hidden_logits([RowPlan(PROMPT, 0, [1, 2, 3], adapter_slot=0)])
    np.testing.assert_allclose(logits, forward(base.config, base.params, PROMPT), atol=2e-5)


def engine_of(checkpoint: Checkpoint, smollm2_tokenizer, **options) -> Engine:
    engine = Engine(checkpoint, smollm2_tokenizer, EngineConfig(**{**LIMITS, **options}))
    engine.runner.warmup(buckets=engine.runner.essential_buckets())
    return engine


@pytest.fixture(scope="module")
def vocab_base(smollm2_tokenizer):
    """The tiny base over SmolLM2's vocabulary, so that the engine's detokenizer works."""
    config = tiny_checkpoint(96).config.replace(vocab_size=smollm2_tokenizer.vocab_size)
    return Checkpoint(config, random_params(config, seed=5), ModelSource(id="tiny", path=None, format="hf",
                                                                                     context_length=512))


@pytest.fixture(scope="module")
def vocab_adapters(vocab_base, tmp_path_factory):
    root = tmp_path_factory.mktemp("vocab-adapters")
    made = {}
    for seed in range(3):
        pairs = random_adapter(vocab_base.config, RANK, seed=20 + seed, magnitude=1.0)
        write_adapter(root / f"a{seed}", pairs, RANK, 8.0)
        made[f"a{seed}"] = (load_lora(f"a{seed}", root / f"a{seed}", vocab_base.config),
                            merged_params(vocab_base.params, pairs, 8.0 / RANK))
    return made


@pytest.fixture(scope="module")
def slotted(vocab_base, smollm2_tokenizer):
    """One engine with two slots of rank 8 for the engine tests below (each compile costs seconds)."""
    return engine_of(vocab_base, smollm2_tokenizer, max_loras=2, max_lora_rank=8)


def greedy_request(request_id: str, adapter=None, max_tokens: int = 6, **options) -> Request:
    return Request(request_id, PROMPT, SamplingParams(temperature=0.0), StopCriteria(max_tokens=max_tokens,
                                                                                      ignore_eos=True),
                   adapter=adapter, **options)


def test_a_mixed_batch_gives_each_row_its_adapter_s_tokens(vocab_base, vocab_adapters, slotted):
    """Rows of two adapters and of the base in one batch: each row's greedy tokens are those
    of the merged weights (NumPy), and differ from the base's."""
    engine = slotted
    a0, a1 = vocab_adapters["a0"][0], vocab_adapters["a1"][0]
    together = engine.generate([greedy_request("base"), greedy_request("a0", a0), greedy_request("a1", a1)])
    assert together["base"] == greedy(vocab_base.config, vocab_base.params, PROMPT, 6)
    for name in ("a0", "a1"):
        expected = greedy(vocab_base.config, vocab_adapters[name][1], PROMPT, 6)
        assert together[name] == expected, name
        assert expected != together["base"]
    assert engine.generate([greedy_request("alone", a1)])["alone"] == together["a1"]


def test_slots_past_max_loras_evict_the_least_recently_used(vocab_base, vocab_adapters, slotted):
    """Two slots, three adapters all asked at once: one waits for a slot and takes the least
    recently used one once free; every request ends with its own adapter's tokens."""
    engine, slots = slotted, slotted.adapters
    evictions = slots.num_evictions
    requests = [greedy_request(name, vocab_adapters[name][0]) for name in ("a0", "a1", "a2")]
    outputs = engine.generate(requests)
    for name in ("a0", "a1", "a2"):
        assert outputs[name] == greedy(vocab_base.config, vocab_adapters[name][1], PROMPT, 6), name
    assert slots.num_evictions > evictions  # three adapters through two slots
    assert len(slots.resident) == 2 and slots.holders == [0, 0]
    # The least recently used goes: use the older one again, and a newcomer takes the other's slot.
    older, newer = slots.resident
    engine.generate([greedy_request("old", vocab_adapters[older][0], max_tokens=1)])
    assert slots.resident == [newer, older]
    newcomer = ({"a0", "a1", "a2"} - {older, newer}).pop()
    engine.generate([greedy_request("new", vocab_adapters[newcomer][0], max_tokens=1)])
    assert slots.resident == [older, newcomer]


def test_adapters_never_share_prefix_cache_pages(vocab_adapters, slotted):
    engine, a0 = slotted, vocab_adapters["a0"][0]
    prompt = [90, 91, 92, 93, 94, 95, 96, 97, 98]  # no other test's, so nothing cached it before

    def request(request_id, adapter):
        return Request(request_id, prompt, SamplingParams(temperature=0.0), StopCriteria(max_tokens=1), adapter=adapter)

    cached = {}
    for request_id, adapter in (("base", None), ("a0", a0), ("a0-again", a0), ("base-again", None)):
        seq = engine.output.new_sequence(request(request_id, adapter), seed=0, matcher=None)
        engine.block_manager.allocate(seq)  # what admission would find in the prefix cache
        cached[request_id] = seq.num_computed_tokens
        engine.block_manager.free(seq)
        engine.generate([request(request_id, adapter)])
    full = (len(prompt) - 1) // LIMITS["page_size"] * LIMITS["page_size"]
    assert cached == {"base": 0, "a0": 0, "a0-again": full, "base-again": full}


def test_beams_and_predicted_outputs_run_with_the_adapter(vocab_base, vocab_adapters, slotted, smollm2_tokenizer):
    """Beams fork with their parent's adapter, and a prediction's drafts are verified under it:
    the same results as the engine serving the merged weights as its base."""
    adapter, merged = vocab_adapters["a2"]
    with_adapter = slotted
    merged_engine = engine_of(Checkpoint(vocab_base.config, merged, vocab_base.source), smollm2_tokenizer)
    beam = BeamSearchParams(num_beams=3)
    expected = merged_engine.generate([greedy_request("beam", beam=beam)])
    assert with_adapter.generate([greedy_request("beam", adapter, beam=beam)]) == expected
    plain = merged_engine.generate([greedy_request("p", max_tokens=8)])["p"]
    predicted = with_adapter.generate([greedy_request("p", adapter, max_tokens=8, prediction=tuple(plain[:6]))])
    assert predicted["p"] == plain


@pytest.mark.parametrize(("change", "message"), [
    ({"use_dora": True}, "DoRA"),
    ({"bias": "lora_only"}, "biases"),
    ({"rank_pattern": {"q_proj": 2}}, "rank_pattern"),
    ({"modules_to_save": ["lm_head"]}, "whole modules"),
    ({"r": 0}, "positive"),
])
def test_peft_variants_this_engine_cannot_run_are_refused(base, tmp_path, change, message):
    pairs = random_adapter(base.config, RANK, seed=1, targets=("q_proj",))
    directory = write_adapter(tmp_path / "bad", pairs, RANK, 8.0, extra_config=change)
    with pytest.raises(ValueError, match=message):
        load_lora("bad", directory, base.config)


def test_tensors_of_unknown_modules_or_shapes_are_refused_by_name(base, tmp_path):
    from safetensors.numpy import save_file

    pairs = random_adapter(base.config, RANK, seed=1, targets=("q_proj",))
    directory = write_adapter(tmp_path / "extra", pairs, RANK, 8.0)
    tensors = {"base_model.model.lm_head.lora_A.weight": np.zeros((RANK, 32), np.float32)}
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    with pytest.raises(ValueError, match="lm_head"):
        load_lora("extra", directory, base.config)
    (directory / "adapter_config.json").write_text(json.dumps({"r": RANK, "lora_alpha": 8}))
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    save_file({key: np.zeros((RANK, 7), np.float32)}, str(directory / "adapter_model.safetensors"))
    with pytest.raises(ValueError, match="shape"):
        load_lora("extra", directory, base.config)


def test_an_adapter_past_the_slots_rank_or_targets_does_not_fit(base, adapters):
    adapter = adapters["all"][0]
    with pytest.raises(ValueError, match="max_lora_rank 2"):
        check_fits(adapter, base.config, EngineConfig(**LIMITS, max_loras=1, max_lora_rank=2))
    with pytest.raises(ValueError, match="leave out"):
        check_fits(adapter, base.config, EngineConfig(**LIMITS, max_loras=1, lora_targets=("q_proj", "v_proj")))
    check_fits(adapters["attn"][0], base.config, EngineConfig(**LIMITS, max_loras=1, lora_targets=LORA_TARGETS[:4]))


def test_without_slots_the_step_has_no_lora_weights_and_refuses_an_adapter(vocab_base, vocab_adapters,
                                                                            smollm2_tokenizer):
    engine = Engine(vocab_base, smollm2_tokenizer, EngineConfig(**LIMITS))  # nothing compiled: no step runs
    assert not [name for name in engine.runner.state["layers"] if str(name).startswith("lora_")]
    with pytest.raises(ValueError, match="no LoRA adapter slots"):
        engine.add_request(greedy_request("x", vocab_adapters["a0"][0]))


def test_an_adapter_on_smollm2_gives_the_merged_weights_logits(smollm2_checkpoint, smollm2_tokenizer, tmp_path):
    """The real model (float32 weights, unquantized) with a rank-8 adapter on every
    projection, read from PEFT files: its logits are the NumPy forward's over W + scale B A."""
    config, params = smollm2_checkpoint.config, smollm2_checkpoint.params
    pairs = random_adapter(config, 8, seed=40, magnitude=0.5)
    adapter = load_lora("smol", write_adapter(tmp_path / "smol", pairs, 8, 16.0), config)
    runner = ModelRunner(config, EngineConfig(**{**LIMITS, "max_num_batched_tokens": 64}, quantization="none",
                                              dtype="float32", max_loras=1, max_lora_rank=8), params)
    runner.load_adapter(0, adapter)
    prompt = smollm2_tokenizer.encode("The three primary colors are")
    logits = runner.hidden_logits([RowPlan(prompt, 0, [1, 2, 3], adapter_slot=0), RowPlan(prompt, 0, [4, 5, 6])])
    adapted, base = logits[: len(prompt)], logits[len(prompt):]
    expected = forward(config, merged_params(params, pairs, 16.0 / 8), prompt)
    assert relative_error(adapted, expected) < 1e-4
    assert relative_error(base, forward(config, params, prompt)) < 1e-4
    assert relative_error(expected, forward(config, params, prompt)) > 1e-2  # the adapter moves the logits


def relative_error(actual, expected) -> float:
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
