"""Engine behaviour on a tiny random model: preemption, no recompiles, seeds, validation."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from shared_configs import ROOMY
from tiny_models import tiny_checkpoint

from engine.config import EngineConfig
from engine.engine import Engine
from engine.host.request import Request, SamplingParams, StopCriteria

# 32 requests of up to ~60 tokens need ~500 pages at once; 80 force preemption and recompute.
CRAMPED = dataclasses.replace(ROOMY, num_pages=80)


@pytest.fixture(scope="module")
def roomy(tiny_engine_factory):
    return tiny_engine_factory(ROOMY)


def workload(vocab_size: int, count: int = 32, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng(seed)
    return [
        Request(f"req-{i}", [int(t) for t in rng.integers(0, vocab_size, int(rng.integers(5, 40)))],
                SamplingParams(temperature=0.0), StopCriteria(max_tokens=int(rng.integers(8, 24)), ignore_eos=True))
        for i in range(count)
    ]


def test_preempted_requests_all_complete_correctly(tiny_engine_factory, roomy):
    requests = workload(roomy.model_config.vocab_size)
    expected = roomy.generate(requests)
    cramped = tiny_engine_factory(CRAMPED)
    preemptions = []
    schedule = cramped.scheduler.schedule

    def counting_schedule():
        output = schedule()
        preemptions.extend(output.preempted)
        return output

    cramped.scheduler.schedule = counting_schedule
    produced = cramped.generate(requests)
    assert preemptions, "the cache was meant to be too small for all requests at once"
    for request in requests:
        assert len(produced[request.request_id]) == request.stop.max_tokens
        assert produced[request.request_id] == expected[request.request_id], request.request_id
    assert cramped.block_manager.num_free_pages == CRAMPED.num_pages - 1  # nothing leaked


def test_serving_after_warmup_never_compiles(roomy):
    compiles = []

    def listen(event: str, duration: float, **_) -> None:
        if "compile" in event:
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        requests = workload(roomy.model_config.vocab_size, count=20, seed=1)
        requests += [Request("long", list(range(1, 200)), SamplingParams(temperature=0.7, seed=3),
                             StopCriteria(max_tokens=5))]
        roomy.generate(requests)
        assert compiles == []
        jax.jit(lambda x: x + 1)(np.ones(3))  # the listener does see a compilation
        assert compiles
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def test_with_only_its_essential_buckets_the_engine_serves_the_same_tokens_without_compiling(smollm2_tokenizer):
    """What `flint serve` is healthy with: one token and the largest bucket; the rest later.
    (No prefix caching, so the second run computes its prompts whole, in the buckets that fit;
    three buckets, so that one is left for later.)"""
    config = dataclasses.replace(ROOMY, enable_prefix_caching=False, optimize_compiled_code=False,
                                 token_buckets=(1, 4, 128))
    engine = Engine(tiny_checkpoint(smollm2_tokenizer.vocab_size), smollm2_tokenizer, config)
    engine.runner.warmup(buckets=engine.runner.essential_buckets())
    assert engine.runner.remaining_buckets() == (4,)
    assert engine.runner.bucket_for(3) == 128 and engine.runner.bucket_for(1) == 1
    assert engine.grammars._tokenizer is None  # built for the first grammar only
    compiles = []

    def listen(event: str, duration: float, **_) -> None:
        if "compile" in event:
            compiles.append(event)

    requests = workload(engine.model_config.vocab_size, count=12, seed=2)
    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        produced = engine.generate(requests)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == []
    engine.compile_remaining()
    assert engine.runner.remaining_buckets() == () and engine.runner.bucket_for(3) == 4
    assert engine.grammars._tokenizer is None  # no request constrained its output
    assert produced == engine.generate(requests)


def test_buckets_compiled_on_several_threads_are_each_reported_once_in_order(smollm2_tokenizer):
    config = dataclasses.replace(ROOMY, optimize_compiled_code=False, token_buckets=(1, 4, 128))
    engine = Engine(tiny_checkpoint(smollm2_tokenizer.vocab_size), smollm2_tokenizer, config)
    lines = []
    engine.runner.warmup(lines.append, threads=3)
    assert engine.runner.remaining_buckets() == ()
    assert [int(line.split(": ")[1].split()[0]) for line in lines] == [1, 4, 128]
    assert [line.split(":")[0] for line in lines] == ["compiled bucket 1/3", "compiled bucket 2/3",
                                                       "compiled bucket 3/3"]


def test_seeded_sampling_is_independent_of_the_batch(roomy):
    sampling = SamplingParams(temperature=1.0, seed=1234)
    stop = StopCriteria(max_tokens=12, ignore_eos=True)
    prompt = [5, 17, 99, 3, 42]
    alone = roomy.generate([Request("seeded-alone", prompt, sampling, stop)])["seeded-alone"]
    others = workload(roomy.model_config.vocab_size, count=7, seed=2)
    batched = roomy.generate([Request("seeded-batched", prompt, sampling, stop), *others])["seeded-batched"]
    assert alone == batched
    other_seed = roomy.generate([Request("seeded-other", prompt, SamplingParams(temperature=1.0, seed=99),
                                         stop)])["seeded-other"]
    assert other_seed != alone


def test_unseeded_requests_get_a_reported_seed(roomy):
    roomy.add_request(Request("unseeded", [1, 2, 3], SamplingParams(temperature=1.0), StopCriteria(max_tokens=2)))
    seeds = {output.seed for output in iter_outputs(roomy)}
    assert len(seeds) == 1 and seeds.pop() > 0


def iter_outputs(engine):
    while engine.has_unfinished():
        yield from engine.step()


@pytest.mark.parametrize("prompt, stop, message", [
    ([], StopCriteria(), "empty"),
    (list(range(300)), StopCriteria(), "limit"),
    ([10**9], StopCriteria(), "token ids"),
    ([1, 2], StopCriteria(max_tokens=0), "max_tokens"),
    ([1, 2], StopCriteria(strings=("end", "")), "stop strings"),
])
def test_requests_that_cannot_be_served_are_refused(roomy, prompt, stop, message):
    with pytest.raises(ValueError, match=message):
        roomy.add_request(Request("bad", prompt, SamplingParams(), stop))
    assert not roomy.has_unfinished()


def test_length_is_capped_by_max_model_len(roomy):
    prompt = list(range(1, 250))
    out = roomy.generate([Request("near-limit", prompt, SamplingParams(temperature=0.0),
                                  StopCriteria(max_tokens=50, ignore_eos=True))])
    assert len(out["near-limit"]) == ROOMY.max_model_len - len(prompt)


def test_max_tokens_zero_scores_the_prompt_and_generates_nothing(roomy):
    """lm-eval's loglikelihood call: a prefill (here in two chunks) with prompt logprobs only."""
    prompt = [(7 * i + 3) % 500 + 1 for i in range(200)]
    free_before = roomy.block_manager.num_free_pages
    for request in (Request("score", prompt, SamplingParams(prompt_logprobs=2), StopCriteria(max_tokens=0)),
                    Request("sample", prompt, SamplingParams(temperature=0.0, prompt_logprobs=2),
                            StopCriteria(max_tokens=3))):
        roomy.add_request(request)
    outputs = {"score": [], "sample": []}
    for output in iter_outputs(roomy):
        outputs[output.request_id].append(output)
    (only,) = outputs["score"]
    assert only.finish_reason == "length" and only.new_token_ids == [] and only.num_output_tokens == 0
    # The same prompt scored by a request that also generates gives the same logprobs.
    reference = outputs["sample"][0].prompt_logprobs
    assert [e.token_id for e in only.prompt_logprobs] == prompt[1:] == [e.token_id for e in reference]
    assert [e.logprob for e in only.prompt_logprobs] == pytest.approx([e.logprob for e in reference], abs=1e-5)
    assert roomy.block_manager.num_free_pages == free_before  # its pages are back


def test_an_engine_compiled_without_optimizations_serves_the_same_tokens(tiny_engine_factory):
    """`optimize_compiled_code=False` (what the factory's engines use) changes how long a
    compile takes, never what a step computes."""
    config = EngineConfig(max_model_len=64, max_num_seqs=4, max_num_batched_tokens=16, page_size=4, num_pages=80,
                          token_buckets=(16,))
    assert config.compiler_options is None
    unoptimized = tiny_engine_factory(config)
    assert unoptimized.config.compiler_options == {"xla_backend_optimization_level": 0,
                                                   "xla_llvm_disable_expensive_passes": True}
    optimized = tiny_engine_factory(config, optimized=True)
    assert optimized.config.compiler_options is None
    requests = workload(optimized.model_config.vocab_size, count=4, seed=3)
    assert unoptimized.generate(requests) == optimized.generate(requests)
