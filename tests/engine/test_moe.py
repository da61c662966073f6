"""Mixtures of experts (engine/models/moe.py): Qwen3-MoE and Mixtral written as Hugging Face
and llama.cpp write them, loaded, and run against an independent NumPy forward
(tests/moe_reference.py): uneven expert loads, a router tie, batching, tensor parallelism, int8
attention on both CPU paths, and each form of the experts' products (the accelerators' grouped
one included)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from family_configs import MOE
from loader_files import write_gguf, write_hf
from moe_reference import experts as reference_experts
from moe_reference import forward, greedy, routed_forward, routes
from native_kernels import require_native_kernels
from numpy_reference import int8_rounded, rms_norm, served_head
from test_loaders import flat

from engine.config import EngineConfig
from engine.device.native import ops as native_ops
from engine.device.runner import ModelRunner, RowPlan
from engine.device.integer_weight import Int8Weight
from engine.engine import Engine
from engine.host.request import Request, SamplingParams, StopCriteria
from engine.loader.checkpoint import Checkpoint, load_checkpoint
from engine.loader.source import ModelSource
from engine.models import moe as moe_module
from engine.models.moe import dense, gathered, grouped, route
from engine.models.params import random_params

HERE = Path(__file__).resolve().parent
# XLA's optimizations off: these tiny models compile far more than they run (EngineConfig says why).
RUNNER = EngineConfig(max_model_len=64, max_num_seqs=4, max_num_batched_tokens=32, page_size=4, num_pages=40,
                      optimize_compiled_code=False)
PROMPT = [int(t) for t in np.random.default_rng(1).integers(0, 96, 30)]


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


@pytest.fixture(scope="module", params=sorted(MOE))
def moe(request):
    config = MOE[request.param]
    return request.param, config, random_params(config, seed=2)


@pytest.mark.parametrize("write", [write_hf, write_gguf], ids=["hf", "gguf"])
def test_the_checkpoint_loads_its_config_and_experts(tmp_path, moe, write):
    name, config, params = moe
    path = tmp_path / ("model.gguf" if write is write_gguf else "model")
    checkpoint = load_checkpoint(str(write(path, config, params, name)))
    assert checkpoint.config == config
    for key, value in flat(params).items():
        np.testing.assert_array_equal(flat(checkpoint.params)[key], value, err_msg=key)


def check_chunks_and_decodes_against_the_reference(config, params):
    """A prompt in two chunks, then four decodes, through a ModelRunner, against the NumPy forward."""
    expected = forward(config, params, PROMPT)
    runner = ModelRunner(config, RUNNER, params)
    start = 0
    for size in (13, 13, 1, 1, 1, 1):
        logits = runner.hidden_logits([RowPlan(PROMPT[start:start + size], start, list(range(2, 10)))])
        assert relative_error(logits, expected[start:start + size]) < 1e-4, f"tokens {start}..{start + size}"
        start += size


def test_prefill_chunks_and_decodes_match_the_reference(moe):
    _, config, params = moe
    check_chunks_and_decodes_against_the_reference(config, params)


def first_layer_routes(config, params, tokens):
    """The experts the first layer routes `tokens` to, and their router probabilities."""
    h = rms_norm(params["embed"][np.asarray(tokens)], params["layers"]["attn_norm"][0], config.rms_norm_eps)
    return routes(config, params["layers"]["router"][0], h.astype(np.float32))


def test_uneven_loads_and_router_ties_are_the_reference_s():
    """In the first layer experts 0, 1 and 2 share one router row and the others have none:
    a token either ties 0, 1 and 2 at the top (where its row product is positive) or ties
    3 to 7 (at 0). Each tie goes to the lower experts, so four experts take every token."""
    config = MOE["qwen3_moe"]
    params = random_params(config, seed=3)
    router = params["layers"]["router"]
    router[0, 1] = router[0, 2] = router[0, 0]
    router[0, 3:] = 0
    picks, _ = first_layer_routes(config, params, PROMPT)
    assert {tuple(pick) for pick in picks} == {(0, 1), (3, 4)}
    swapped = {**params, "layers": {**params["layers"]}}
    for name in ("we_gate", "we_up", "we_down"):
        weights = swapped["layers"][name] = params["layers"][name].copy()
        weights[0, [1, 2]] = weights[0, [2, 1]]
    expected = forward(config, params, PROMPT)
    assert relative_error(forward(config, swapped, PROMPT), expected) > 1e-2  # the tie decides the output
    runner = ModelRunner(config, RUNNER, params)
    assert relative_error(runner.hidden_logits([RowPlan(PROMPT, 0, list(range(2, 10)))]), expected) < 1e-4


def tiny_engine(moe, tokenizer, seed: int, step_tokens: int):
    """(config, weights, Engine) of the family `moe` over SmolLM2's vocabulary, random
    weights of `seed`, steps of up to `step_tokens` tokens; its essential buckets compiled."""
    name, config, _ = moe
    config = config.replace(vocab_size=tokenizer.vocab_size)
    params = random_params(config, seed=seed)
    checkpoint = Checkpoint(config, params, ModelSource(id=f"tiny-{name}", path=None, format="hf", context_length=512))
    engine = Engine(checkpoint, tokenizer, EngineConfig(max_model_len=64, max_num_seqs=4,
                                                        max_num_batched_tokens=step_tokens, page_size=4, num_pages=60,
                                                        optimize_compiled_code=False))
    engine.runner.warmup(buckets=engine.runner.essential_buckets())
    return config, params, engine


def test_greedy_tokens_match_the_reference_alone_and_batched(moe, smollm2_tokenizer):
    """Batching changes every expert's group; no token's output may change with it."""
    config, params, engine = tiny_engine(moe, smollm2_tokenizer, seed=4, step_tokens=32)
    rng = np.random.default_rng(7)
    prompts = {f"r{length}": [int(t) for t in rng.integers(0, config.vocab_size, length)] for length in (2, 9, 20)}

    def request(request_id):
        return Request(request_id, prompts[request_id], SamplingParams(temperature=0.0),
                       StopCriteria(max_tokens=8, ignore_eos=True))

    together = engine.generate([request(request_id) for request_id in prompts])
    assert engine.generate([request("r9")])["r9"] == together["r9"]
    for request_id, prompt in prompts.items():
        assert together[request_id] == greedy(config, params, prompt, 8), request_id


@pytest.mark.parametrize("num_experts", [8, 6])
def test_tensor_parallel_over_2_and_4_devices_matches_one(num_experts):
    """8 experts split over the devices (expert parallelism); 6 do not divide 4, and then
    each expert's hidden units split instead."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE.parent), str(HERE)])}
    result = subprocess.run([sys.executable, str(HERE / "moe_mesh_check.py"), str(num_experts)], capture_output=True,
                            text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for devices in ("2", "4"):
        assert report[devices]["relative_error"] < 1e-5
    assert report["2"]["we_gate_spec"] == "P(None, 'tp', None, None)"
    expected = "P(None, 'tp', None, None)" if num_experts == 8 else "P(None, None, 'tp', None)"
    assert report["4"]["we_gate_spec"] == expected


# Inputs sharing one int8 scale (engine/device/weights.py's docstring); a row whose width it
# does not divide is one group.
INT8_GROUP = 64


def rounded_as_int8(matrix) -> np.ndarray:
    """`matrix` as symmetric int8 per INT8_GROUP inputs holds it, rounded here in NumPy."""
    width = matrix.shape[-1]
    return int8_rounded(np.asarray(matrix, np.float32), INT8_GROUP if width % INT8_GROUP == 0 else width)


def held(weight) -> np.ndarray:
    """The matrix an Int8Weight stands for: its int8 values times their group's scale."""
    values, scales = np.asarray(weight.values, np.float32), np.asarray(weight.scales)
    return (values.reshape(*scales.shape, -1) * scales[..., None]).reshape(values.shape)


# (cpu_kernels, tolerance): the jnp path's products are float32's, as the reference's are; the
# native kernels' (the path `flint serve` takes on a CPU) take their inputs in bfloat16
# (engine/device/native/ops.py linear), which moves these logits by about 0.4% of the largest.
INT8_PATHS = [("jnp", 1e-4), ("native", 1e-2)]


@pytest.mark.parametrize(("cpu_kernels", "tolerance"), INT8_PATHS, ids=[path for path, _ in INT8_PATHS])
def test_int8_quantizes_attention_and_leaves_the_experts(moe, cpu_kernels, tolerance):
    """--quantization int8 (auto's choice for a GGUF file on a CPU) serves a mixture of
    experts: its attention projections in int8, its experts as they are. Rounded to int8 in
    NumPy here: the engine holds the same matrices, and serves the reference's logits on them.
    A hidden size of 128: two groups of 64 per row of q, k and v, each with its own scale."""
    if cpu_kernels == "native":
        require_native_kernels()
    config = moe[1].replace(hidden_size=128)
    params = random_params(config, seed=2)
    runner = ModelRunner(config, dataclasses.replace(RUNNER, quantization="int8", cpu_kernels=cpu_kernels), params)
    # The native kernels read their weights packed in blocks (native/ops.py `packed`).
    assert isinstance(runner.state["layers"]["wqkv"], native_ops.PackedWeight) == (cpu_kernels == "native")
    layers = {name: native_ops.unpacked(weight) if isinstance(weight, native_ops.PackedWeight) else weight
              for name, weight in runner.state["layers"].items()}
    assert isinstance(layers["wqkv"], Int8Weight) and layers["we_gate"].dtype == np.float32
    rounded = {name: rounded_as_int8(params["layers"][name]) for name in ("wq", "wk", "wv", "wo")}
    # Per output row, int8 groups are the same in the fused and the separate projections. (Not
    # bit for bit: XLA divides by 127 as a product with its reciprocal, which NumPy does not; a
    # value a step off would be a relative 1/127 of its group's largest at least.)
    for served, parts in (("wqkv", ("wq", "wk", "wv")), ("wo", ("wo",))):
        np.testing.assert_allclose(held(layers[served]), np.concatenate([rounded[n] for n in parts], 1), rtol=1e-6,
                                   atol=0, err_msg=served)
    for expert_weight in ("router", "we_gate", "we_up", "we_down"):
        np.testing.assert_array_equal(np.asarray(layers[expert_weight]), params["layers"][expert_weight])
    expected = forward(config, {**served_head(runner, params), "layers": {**params["layers"], **rounded}}, PROMPT)
    assert relative_error(runner.hidden_logits([RowPlan(PROMPT, 0, list(range(2, 10)))]), expected) < tolerance


def test_the_forms_of_the_experts_are_the_reference_s():
    """Grouped (ragged_dot, the accelerators'), gathered (the CPU's one-token steps) and
    dense (its others), each against the NumPy experts: one result, whichever the step's
    shape and backend pick."""
    config = MOE["qwen3_moe"]
    params = random_params(config, seed=6)
    weights = {name: jnp.asarray(params["layers"][name][0]) for name in ("router", "we_gate", "we_up", "we_down")}
    for num_tokens in (1, 5, 17):
        h = np.random.default_rng(num_tokens).standard_normal((num_tokens, config.hidden_size)).astype(np.float32)
        expected = reference_experts(config, params["layers"], 0, h)
        experts, expert_weights = route(jnp.asarray(h), weights["router"], config)
        for form in (grouped, gathered, dense):
            result = np.asarray(form(jnp.asarray(h), weights, config, experts, expert_weights))
            assert relative_error(result, expected) < 1e-5, f"{form.__name__}, {num_tokens} tokens"


def test_the_grouped_form_serves_the_reference_s_logits(moe, monkeypatch):
    """Every step in the grouped form, as on a TPU (`experts_mlp` picks it there alone): a
    prompt in chunks, then decodes, against the NumPy forward."""
    _, config, params = moe
    monkeypatch.setattr(moe_module, "gathered", grouped)
    monkeypatch.setattr(moe_module, "dense", grouped)
    check_chunks_and_decodes_against_the_reference(config, params)


def log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def scored(engine, request_id, prompt, max_tokens, replay=(), prompt_logprobs=0):
    """Greedy outputs of one request with logprobs (and prompt logprobs unless None):
    (output tokens, their TokenLogprobs, the prompt's PromptTokenLogprobs)."""
    sampling = SamplingParams(temperature=0.0, logprobs=0, prompt_logprobs=prompt_logprobs)
    engine.add_request(Request(request_id, prompt, sampling,
                               StopCriteria(max_tokens=max_tokens, ignore_eos=True), routing_replay=tuple(replay)))
    tokens, logprobs, prompt_logprobs = [], [], []
    while engine.has_unfinished():
        for output in engine.step():
            assert output.request_id == request_id and output.error is None, output.error
            tokens += output.new_token_ids
            logprobs += output.logprobs or []
            prompt_logprobs += output.prompt_logprobs or []
            engine.last_cached_tokens = output.num_cached_tokens
    return tokens, logprobs, prompt_logprobs


def test_routing_is_traced_and_replayed_as_the_reference_routes(moe, smollm2_tokenizer):
    """Each logprob carries the experts of the forward that gave it (a prompt token's: the
    token before it), as the NumPy forward routes them. Handed back with other experts,
    the prompt runs on those experts, and never on the pages its plain run cached."""
    config, params, engine = tiny_engine(moe, smollm2_tokenizer, seed=5, step_tokens=16)
    prompt = [int(t) for t in np.random.default_rng(8).integers(0, config.vocab_size, 21)]  # two prompt chunks
    tokens, logprobs, prompt_logprobs = scored(engine, "plain", prompt, 3)
    _, routing = routed_forward(config, params, prompt + tokens)
    flat_routing = routing.reshape(len(routing), -1)
    assert [lp.routing for lp in prompt_logprobs] == [tuple(flat_routing[j]) for j in range(len(prompt) - 1)]
    assert [lp.routing for lp in logprobs] == [tuple(flat_routing[len(prompt) - 1 + i]) for i in range(3)]

    # Other experts for every prompt token: each layer's k experts shifted by one.
    replay = [tuple(int(e) for e in (flat_routing[j] + 1) % config.num_experts) for j in range(len(prompt))]
    tokens, logprobs, prompt_logprobs = scored(engine, "replayed", prompt, 2, replay)
    logits, routing = routed_forward(config, params, prompt + tokens, replay)
    np.testing.assert_array_equal(routing[:len(prompt)].reshape(len(prompt), -1), np.asarray(replay))
    expected = log_softmax(logits.astype(np.float64))
    assert tokens[0] == int(np.argmax(logits[len(prompt) - 1]))
    got = [lp.logprob for lp in prompt_logprobs]
    want = [expected[j - 1, prompt[j]] for j in range(1, len(prompt))]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
    assert [lp.routing for lp in prompt_logprobs] == [replay[j] for j in range(len(prompt) - 1)]
    # The first output token comes from the last prompt token's (replayed) forward; the
    # second from the output token's own, which the router picks.
    assert logprobs[0].routing == replay[-1]
    assert logprobs[1].routing == tuple(routing[len(prompt)].reshape(-1))
    # Without prompt logprobs a prompt reads the prefix cache: the plain run's pages hold
    # the router's KV, which the replayed prompt must not read.
    scored(engine, "plain again", prompt, 1, prompt_logprobs=None)
    assert engine.last_cached_tokens == 20  # the cache is live: five full pages of 4
    _, logprobs, _ = scored(engine, "replayed again", prompt, 1, replay, prompt_logprobs=None)
    np.testing.assert_allclose(logprobs[0].logprob, expected[len(prompt) - 1, tokens[0]], rtol=1e-3, atol=1e-3)


def test_a_replayed_routing_must_fit_the_model_and_the_prompt():
    from engine.host.routing_replay import check_routing_replay

    config = MOE["qwen3_moe"]
    layers, k = config.routing_shape
    fine = tuple(range(k)) * layers

    def check(replay, model=config, prompt=(1, 2, 3)):
        check_routing_replay(Request("r", list(prompt), routing_replay=tuple(replay)), model)

    check([fine, None, fine])
    with pytest.raises(ValueError, match="prompt positions"):
        check([fine] * 4)
    with pytest.raises(ValueError, match="expert ids"):
        check([fine[:-1]])
    with pytest.raises(ValueError, match="distinct"):
        check([(0,) * (layers * k)])
    with pytest.raises(ValueError, match=r"lie in \[0, "):
        check([(config.num_experts,) + fine[1:]])
    with pytest.raises(ValueError, match="mixture-of-experts"):
        check([fine], model=config.replace(num_experts=0, num_experts_per_tok=0))
