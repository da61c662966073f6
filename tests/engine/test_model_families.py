"""The families of engine/models beyond the plain Llama: Gemma 2, Gemma 3 and Mistral's
sliding window. Each is written as Hugging Face and llama.cpp would write it, loaded, and
run against an independent NumPy forward (tests/gemma_reference.py,
tests/numpy_reference.py) over contexts longer than the window, across page edges,
and past the first block of cached keys (which a windowed step skips)."""

from __future__ import annotations

import numpy as np
import pytest
from family_configs import FAMILIES
from gemma_reference import forward as gemma_forward
from gemma_reference import greedy as gemma_greedy
from loader_files import write_gguf, write_hf
from numpy_reference import forward as llama_forward
from numpy_reference import greedy as llama_greedy
from test_loaders import flat

from engine.config import EngineConfig
from engine.device.attention import choose
from engine.device.runner import ModelRunner, RowPlan
from engine.engine import Engine
from engine.host.request import Request, SamplingParams, StopCriteria
from engine.loader.checkpoint import Checkpoint, load_checkpoint
from engine.loader.source import ModelSource
from engine.models import family_of
from engine.models.params import random_params

REFERENCE = {"gemma2": (gemma_forward, gemma_greedy), "gemma3": (gemma_forward, gemma_greedy),
             "mistral": (llama_forward, llama_greedy)}
# XLA's optimizations off: these tiny models compile far more than they run (EngineConfig says why).
RUNNER = EngineConfig(max_model_len=256, max_num_seqs=4, max_num_batched_tokens=64, page_size=4, num_pages=80,
                      optimize_compiled_code=False)


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    config = FAMILIES[request.param]
    return request.param, config, random_params(config, seed=7)


def test_the_hf_checkpoint_loads_its_config_and_weights(tmp_path, family):
    name, config, params = family
    checkpoint = load_checkpoint(str(write_hf(tmp_path / "model", config, params, name)))
    assert checkpoint.config == config
    for key, value in flat(params).items():
        np.testing.assert_array_equal(flat(checkpoint.params)[key], value, err_msg=key)


@pytest.mark.parametrize("name", ["gemma2", "gemma3"])
def test_the_gguf_checkpoint_loads_with_llama_cpp_s_norms_and_rules(tmp_path, name):
    """llama.cpp stores Gemma's norms plus one; its files carry no query scalar (its rule:
    head_dim below 27B) and no local RoPE base (its constant: 10,000)."""
    config = FAMILIES[name]
    params = random_params(config, seed=8)
    checkpoint = load_checkpoint(str(write_gguf(tmp_path / "model.gguf", config, params, name)))
    assert checkpoint.config == config.replace(query_pre_attn_scalar=float(config.head_dim))
    for key, value in flat(params).items():
        np.testing.assert_allclose(flat(checkpoint.params)[key], value, rtol=0, atol=1e-6, err_msg=key)


def test_prefill_chunks_and_decodes_match_the_reference(family):
    """150 tokens in chunks of 50, then decodes: the windows (5 and 6 keys) cut every
    chunk, cross page edges, and by the end leave the first block of 128 cached keys unread."""
    name, config, params = family
    tokens = [int(t) for t in np.random.default_rng(3).integers(0, config.vocab_size, 154)]
    expected = REFERENCE[name][0](config, params, tokens)
    runner = ModelRunner(config, RUNNER, params)
    assert runner.attention == "reference"
    table = list(range(3, 3 + 39))  # not from page 1, so page lookups matter
    start = 0
    for size in (50, 50, 50, 1, 1, 1, 1):
        logits = runner.hidden_logits([RowPlan(tokens[start:start + size], start, table)])
        assert relative_error(logits, expected[start:start + size]) < 1e-4, f"tokens {start}..{start + size}"
        start += size


def test_the_window_and_the_soft_caps_change_the_logits(family):
    """A positive control: the reference is not blind to the features under test."""
    name, config, params = family
    tokens = list(range(3, 40))
    forward = REFERENCE[name][0]
    plain = config.replace(layer_windows=(), attn_logit_softcapping=None, final_logit_softcapping=None)
    assert relative_error(forward(plain, params, tokens)[-1], forward(config, params, tokens)[-1]) > 1e-3


def test_greedy_tokens_match_the_reference_alone_and_batched(family, smollm2_tokenizer):
    """Continuous batching of prompts longer and shorter than the window: each request's
    tokens are the reference's, and the same alone as beside the others."""
    name, config, _ = family
    # The tokenizer's vocabulary, as the engine requires. Gemma 2's own final cap (30): a cap
    # of 3 over 49,152 random logits leaves near-ties at the top that float rounding decides.
    config = config.replace(vocab_size=smollm2_tokenizer.vocab_size,
                            final_logit_softcapping=config.final_logit_softcapping and 30.0)
    params = random_params(config, seed=9)
    checkpoint = Checkpoint(config, params, ModelSource(id=f"tiny-{name}", path=None, format="hf",
                                                        context_length=512))
    engine = Engine(checkpoint, smollm2_tokenizer, EngineConfig(max_model_len=128, max_num_seqs=4,
                                                                max_num_batched_tokens=32, page_size=4,
                                                                num_pages=80, optimize_compiled_code=False))
    engine.runner.warmup(buckets=engine.runner.essential_buckets())
    rng = np.random.default_rng(5)
    prompts = {f"r{length}": [int(t) for t in rng.integers(0, config.vocab_size, length)] for length in (3, 17, 40)}

    def request(request_id):
        return Request(request_id, prompts[request_id], SamplingParams(temperature=0.0),
                       StopCriteria(max_tokens=10, ignore_eos=True))

    together = engine.generate([request(request_id) for request_id in prompts])
    alone = engine.generate([request("r17")])
    assert alone["r17"] == together["r17"]
    for request_id, prompt in prompts.items():
        assert together[request_id] == REFERENCE[name][1](config, params, prompt, 10), request_id


def test_windows_and_soft_caps_take_the_reference_attention():
    """The kernels have neither: auto serves such a model with the reference, and a kernel
    asked for by name is refused with the reason."""
    shape = ("float32", 8, 4, 2, 4)
    assert choose("auto", *shape, plain=False).in_use == "reference"
    with pytest.raises(ValueError, match="sliding window or soft-capping"):
        choose("mosaic_gpu", *shape, plain=False)
    with pytest.raises(ValueError, match="sliding window or soft-capping"):
        ModelRunner(FAMILIES["gemma2"], EngineConfig(max_model_len=64, attention="mosaic_gpu", num_pages=40,
                                                     max_num_seqs=4, max_num_batched_tokens=16),
                    random_params(FAMILIES["gemma2"]))


def test_a_window_wider_than_the_engine_s_context_keeps_the_plain_path():
    config = FAMILIES["mistral"]
    assert config.windowed(256) and not config.windowed(6)
    assert family_of(config).name == "mistral"


def test_a_windowed_model_s_sequences_hold_only_the_pages_their_window_reads(smollm2_tokenizer):
    """Mistral's every layer sees 6 keys. Four sequences of 36 tokens would take 36 pages of
    4 between them; in a cache of 15 they run together without a preemption, each keeping
    only the pages its window still reads (one decode step per call: a decode window would
    reserve pages ahead), and their tokens are the reference's."""
    config = FAMILIES["mistral"].replace(vocab_size=smollm2_tokenizer.vocab_size)
    params = random_params(config, seed=10)
    checkpoint = Checkpoint(config, params, ModelSource(id="tiny-mistral", path=None, format="hf", context_length=512))
    engine = Engine(checkpoint, smollm2_tokenizer, EngineConfig(max_model_len=36, max_num_seqs=4,
                                                                max_num_batched_tokens=32, page_size=4, num_pages=16,
                                                                max_decode_steps=1, optimize_compiled_code=False))
    engine.runner.warmup(buckets=engine.runner.essential_buckets())
    rng = np.random.default_rng(6)
    prompts = {f"r{index}": [int(t) for t in rng.integers(0, config.vocab_size, 12)] for index in range(4)}
    for request_id, prompt in prompts.items():
        engine.add_request(Request(request_id, prompt, SamplingParams(temperature=0.0),
                                   StopCriteria(max_tokens=24, ignore_eos=True)))
    sequences = list(engine._sequences.values())
    tokens = {request_id: [] for request_id in prompts}
    while engine.has_unfinished():
        for output in engine.step():
            tokens[output.request_id].extend(output.new_token_ids)
    assert engine.block_manager.window == 6
    assert [seq.num_preemptions for seq in sequences] == [0, 0, 0, 0]
    for request_id, prompt in prompts.items():
        assert tokens[request_id] == llama_greedy(config, params, prompt, 24), request_id
