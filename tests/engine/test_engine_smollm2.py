"""The engine on the embedded SmolLM2-135M-Instruct: reference tokens, batching, prefix cache."""

from __future__ import annotations

import pytest
from numpy_reference import greedy

from engine.host.request import Request, SamplingParams, StopCriteria

GREEDY = SamplingParams(temperature=0.0)
EXACTLY_16 = StopCriteria(max_tokens=16, ignore_eos=True)
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
    "Water boils at a temperature of",
]


def run_alone(engine, request_id, prompt_ids):
    return engine.generate([Request(request_id, prompt_ids, GREEDY, EXACTLY_16)])[request_id]


@pytest.mark.parametrize("index", range(len(PROMPTS)))
def test_greedy_matches_numpy_reference(smollm2_engine, smollm2_checkpoint, smollm2_tokenizer, index):
    prompt_ids = smollm2_tokenizer.encode(PROMPTS[index])
    expected = greedy(smollm2_checkpoint.config, smollm2_checkpoint.params, prompt_ids, 16)
    assert run_alone(smollm2_engine, f"ref-{index}", prompt_ids) == expected


def test_chat_question_is_answered(smollm2_engine, smollm2_tokenizer):
    prompt = smollm2_tokenizer.render_chat([{"role": "user", "content": "What is the capital of France?"}])
    request = Request("chat", smollm2_tokenizer.encode(prompt), GREEDY, StopCriteria(max_tokens=24))
    smollm2_engine.add_request(request)
    text, outputs = "", []
    while smollm2_engine.has_unfinished():
        for output in smollm2_engine.step():
            text += output.text
            outputs.append(output)
    assert "Paris" in text
    reasons = [output.finish_reason for output in outputs]
    assert reasons[-1] == "stop" and "<|im_end|>" not in text  # ended by EOS, which is not text
    assert outputs[-1].stop_reason is None  # EOS is not a stop token id the request named


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_batch_of_sixteen_gives_the_same_tokens_as_alone(request, smollm2_tokenizer, quantization):
    """Batch invariance, float32 and int8: a row's tokens do not depend on what shares its steps."""
    smollm2_engine = request.getfixturevalue("smollm2_engine" if quantization == "none" else "smollm2_int8_engine")
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi".split()
    prompts = [smollm2_tokenizer.encode(" ".join(words[: 1 + i]) + " and then") for i in range(16)]
    alone = {f"solo-{i}": run_alone(smollm2_engine, f"solo-{i}", ids) for i, ids in enumerate(prompts) if i % 5 == 0}
    together = smollm2_engine.generate([Request(f"batch-{i}", ids, GREEDY, EXACTLY_16)
                                        for i, ids in enumerate(prompts)])
    for request_id, tokens in alone.items():
        assert together[request_id.replace("solo", "batch")] == tokens


def test_shared_256_token_prefix_is_served_from_cache(smollm2_engine, smollm2_tokenizer):
    text = " ".join(f"item{i}" for i in range(400))
    prefix = smollm2_tokenizer.encode(text)[:256]
    first = prefix + smollm2_tokenizer.encode(" The list above")
    second = prefix + smollm2_tokenizer.encode(" Count the items")

    def run(request_id, ids):
        smollm2_engine.add_request(Request(request_id, ids, GREEDY, EXACTLY_16))
        tokens, cached = [], None
        while smollm2_engine.has_unfinished():
            for output in smollm2_engine.step():
                tokens += output.new_token_ids
                cached = output.num_cached_tokens
        return tokens, cached

    uncached_tokens, uncached = run("prefix-1", second)
    assert uncached == 0
    tokens, cached = run("prefix-2", first)
    assert cached == 256 and len(tokens) == 16
    again_tokens, again = run("prefix-3", second)
    assert again >= 256
    assert again_tokens == uncached_tokens


def test_abort_frees_every_page(smollm2_engine, smollm2_tokenizer):
    free_before = smollm2_engine.block_manager.num_free_pages
    smollm2_engine.add_request(Request("to-abort", smollm2_tokenizer.encode("Tell me a long story"),
                                       GREEDY, StopCriteria(max_tokens=200)))
    for _ in range(3):
        smollm2_engine.step()
    output = smollm2_engine.abort("to-abort")
    assert output.finish_reason == "abort" and not smollm2_engine.has_unfinished()
    assert smollm2_engine.block_manager.num_free_pages == free_before
