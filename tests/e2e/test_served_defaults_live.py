"""The served defaults: SmolLM2 on the path `flint serve` takes with no flags (auto
quantization: the GGUF file's own Q4_1 blocks and Q8_0 head through the native CPU kernels,
over integer inputs where the CPU has AVX512-VNNI; the auto cache: keys in
bfloat16, values in float8), through HTTP with the `openai` SDK. The session's live server
(tests/e2e/conftest.py) serves that path, with fewer sequences and buckets, so that every
live test runs it too; the first test checks that the two resolve alike.

A row's result must not depend on what shares or went before its steps, so its logprobs are
compared bit for bit (`==`, never a tolerance): alone and inside a busy batch of other
prompts of other lengths; streamed and unstreamed; cold, from the prefix cache, and after a
shorter shared prefix; whole and in chunks; one choice and four with seeds of their own;
with a predicted output verified in steps of many tokens and without; and a seeded tool call
streamed and unstreamed. Beams, which return no logprobs, compare their tokens. Each scenario also checks that it happened (the cache's hits, the
chunks, the batch's company), so a test cannot pass by not exercising its case.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from api.server.cli import build_parser
from api.server.serve import settings_from_args
from engine.device.attention import NATIVE_CPU
from engine.device import native
from engine.device.native import available as native_available
from engine.device.native.ops import PackedWeight

SEEDED = {"temperature": 1.0, "top_p": 0.95, "seed": 1234}
WORDS = ("river stone lantern harbor meadow copper violet thunder orchard candle basket pepper "
         "mirror ladder saddle marble feather willow canyon pebble").split()


@pytest.fixture(scope="module")
def state(live_state):
    return live_state


@pytest.fixture(scope="module")
def model(sdk) -> str:
    return sdk.models.list().data[0].id


def words_prompt(tokenizer, length: int, salt: int) -> list[int]:
    """`length` token ids of text of its own (`salt` picks the words), as a prompt."""
    words = [WORDS[(salt * 7 + i * (salt % 5 + 1)) % len(WORDS)] for i in range(length)]
    return tokenizer.encode(f"Item {salt}: " + " ".join(words))[:length]


def completion(sdk, model, prompt, **options):
    return sdk.completions.create(model=model, prompt=prompt, max_tokens=32, logprobs=1, **options)


def logprobs_of(choice) -> tuple[list, list]:
    return choice.logprobs.tokens, choice.logprobs.token_logprobs


def test_the_server_runs_the_served_defaults(state, tmp_path):
    """What the rest of this module tests: the file's own blocks, the native kernels (integer
    dots where the build has them), float8 values, each left to "auto" as `flint serve`'s
    own flags leave it."""
    served = settings_from_args(build_parser().parse_args(["serve", "--data-dir", str(tmp_path)])).engine
    live = state.settings.engine
    choices = ("quantization", "kv_cache_dtype", "cpu_kernels", "attention", "dtype")
    assert [getattr(live, name) for name in choices] == [getattr(served, name) for name in choices]
    runner = state.engine.engine.runner
    assert native_available()
    assert (runner.cpu_kernels, runner.attention, runner.kv_cache_dtype) == ("native", NATIVE_CPU, "float8_values")
    assert state.engine.engine.config.quantization == "gguf"
    assert state.engine.engine.weight_formats.kept == {"Q4_1": 7 * 30, "Q8_0": 1}
    gate_up, head = runner.state["layers"]["w_gate_up"], runner.state["embed"]
    assert isinstance(gate_up, PackedWeight) and (gate_up.bits, gate_up.mins is not None) == (4, True)
    assert gate_up.dots == head.dots == native.integer_dots()


def streams_in_the_background(sdk, model, prompts, started: threading.Barrier, ends: list):
    """One thread a prompt, each streaming a long seeded completion; `started` is passed once
    every stream has its first token, and each thread appends its end time to `ends`."""

    def run(index, prompt):
        stream = sdk.completions.create(model=model, prompt=prompt, max_tokens=160, stream=True, seed=index,
                                        temperature=0.8, extra_body={"ignore_eos": True})
        first = True
        for _ in stream:
            if first:
                started.wait()
                first = False
        ends.append(time.monotonic())

    threads = [threading.Thread(target=run, args=(i, prompt)) for i, prompt in enumerate(prompts)]
    for thread in threads:
        thread.start()
    return threads


def during_a_busy_batch(sdk, model, tokenizer, call):
    """call() while eight other prompts of other lengths decode, each from before it starts
    to after it ends (checked)."""
    others = [words_prompt(tokenizer, length, salt=10 + length) for length in (5, 17, 33, 64, 90, 128, 200, 300)]
    started, ends = threading.Barrier(len(others) + 1, timeout=300), []
    threads = streams_in_the_background(sdk, model, others, started, ends)
    started.wait()  # every other stream is decoding
    result = call()
    finished = time.monotonic()
    for thread in threads:
        thread.join(timeout=300)
    assert len(ends) == len(others) and all(end > finished for end in ends), "the batch was not busy throughout"
    return result


def test_a_seeded_request_is_the_same_bits_alone_and_in_a_busy_batch(sdk, model, smollm2_tokenizer):
    prompt = words_prompt(smollm2_tokenizer, 40, salt=1)
    alone = completion(sdk, model, prompt, **SEEDED).choices[0]
    busy = during_a_busy_batch(sdk, model, smollm2_tokenizer,
                               lambda: completion(sdk, model, prompt, **SEEDED).choices[0])
    assert logprobs_of(busy) == logprobs_of(alone)
    assert busy.text == alone.text


def test_beams_are_the_same_alone_and_in_a_busy_batch(sdk, model, smollm2_tokenizer):
    """Beam search (which returns no logprobs): each beam's tokens, and the beams' order by
    their summed logprobs, whatever shares the steps."""
    prompt = words_prompt(smollm2_tokenizer, 24, salt=7)

    def beams():
        choices = sdk.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0.0,
                                         extra_body={"num_beams": 3, "return_token_ids": True}).choices
        return [choice.model_extra["tokens"] for choice in sorted(choices, key=lambda choice: choice.index)]

    alone = beams()
    assert len({tuple(tokens) for tokens in alone}) == 3
    assert during_a_busy_batch(sdk, model, smollm2_tokenizer, beams) == alone


def test_streamed_and_unstreamed_are_the_same_bits(sdk, model, smollm2_tokenizer):
    prompt = words_prompt(smollm2_tokenizer, 60, salt=2)
    whole = completion(sdk, model, prompt, **SEEDED).choices[0]
    tokens, token_logprobs = [], []
    for chunk in completion(sdk, model, prompt, stream=True, **SEEDED):
        for choice in chunk.choices:
            if choice.logprobs is not None:
                tokens += choice.logprobs.tokens
                token_logprobs += choice.logprobs.token_logprobs
    assert (tokens, token_logprobs) == logprobs_of(whole)


def greedy_with_cache(sdk, model, prompt, isolation: str):
    """A greedy completion with logprobs in the prefix-cache partition `isolation`: (its
    (tokens, logprobs), the prompt tokens the cache served)."""
    response = completion(sdk, model, prompt, temperature=0.0,
                          extra_body={"prompt_cache_isolation_key": isolation})
    return logprobs_of(response.choices[0]), response.usage.prompt_tokens_details.cached_tokens


def test_a_prompt_is_the_same_bits_cold_from_the_prefix_cache_and_after_a_shorter_prefix(sdk, model,
                                                                                         smollm2_tokenizer):
    prompt = words_prompt(smollm2_tokenizer, 150, salt=3)
    cold, cached = greedy_with_cache(sdk, model, prompt, "cold")
    assert cached == 0
    again, cached = greedy_with_cache(sdk, model, prompt, "cold")
    assert cached >= 144  # every whole page of the prompt
    # Another partition: a prompt sharing only the first 70 tokens goes first, so the
    # prompt's first four pages come from the cache and the rest is computed after them.
    greedy_with_cache(sdk, model, prompt[:70] + words_prompt(smollm2_tokenizer, 30, salt=4), "shorter")
    after_shorter, cached = greedy_with_cache(sdk, model, prompt, "shorter")
    assert cached == 64
    assert again == cold
    assert after_shorter == cold


def recording_prompt_chunks(state) -> dict[str, list[int]]:
    """The prompt chunks (of more than one token) the scheduler gives each request from now
    on, by request id, until `stop_recording`."""
    scheduler = state.engine.engine.scheduler
    chunks, schedule = {}, scheduler.schedule

    def recording():
        output = schedule()
        for item in output.scheduled:
            if item.num_new_tokens > 1:
                chunks.setdefault(item.seq.request_id, []).append(item.num_new_tokens)
        return output

    scheduler.schedule = recording
    return chunks


def stop_recording(state) -> None:
    del state.engine.engine.scheduler.schedule  # the class's own again


def chunks_of(chunks: dict[str, list[int]], prompt_tokens: int) -> list[int]:
    """The chunks of the one request whose chunks add up to a prompt of `prompt_tokens`."""
    found = [sizes for sizes in chunks.values() if sum(sizes) == prompt_tokens]
    assert len(found) == 1, chunks
    return found[0]


def test_a_long_prompt_is_the_same_bits_whole_and_in_chunks(sdk, model, state, smollm2_tokenizer):
    """A prompt 4 tokens short of the step's budget fits a step whole; beside eight decoding
    streams the step has room for 4 tokens fewer than it, and the prompt goes in chunks."""
    prompt = words_prompt(smollm2_tokenizer, state.settings.engine.max_num_batched_tokens - 4, salt=5)
    chunks = recording_prompt_chunks(state)
    try:
        whole = completion(sdk, model, prompt, **SEEDED, extra_body={"prompt_cache_isolation_key": "whole"})
        assert chunks_of(chunks, len(prompt)) == [len(prompt)]
        chunks.clear()
        others = [words_prompt(smollm2_tokenizer, 20 + i, salt=20 + i) for i in range(8)]
        started, ends = threading.Barrier(len(others) + 1, timeout=300), []
        threads = streams_in_the_background(sdk, model, others, started, ends)
        started.wait()
        chunked = completion(sdk, model, prompt, **SEEDED, extra_body={"prompt_cache_isolation_key": "chunked"})
        for thread in threads:
            thread.join(timeout=300)
    finally:
        stop_recording(state)
    assert len(chunks_of(chunks, len(prompt))) >= 2
    assert logprobs_of(chunked.choices[0]) == logprobs_of(whole.choices[0])


def test_four_choices_with_seeds_of_their_own_are_each_the_same_bits_as_alone(sdk, model, smollm2_tokenizer):
    prompt = words_prompt(smollm2_tokenizer, 30, salt=6)
    seeds = [11, 12, 13, 14]
    together = completion(sdk, model, prompt, n=4, temperature=1.0, top_p=0.95, extra_body={"seed": seeds})
    by_index = sorted(together.choices, key=lambda choice: choice.index)
    assert len({tuple(choice.logprobs.tokens) for choice in by_index}) > 1  # the seeds do differ
    for seed, choice in zip(seeds, by_index):
        alone = completion(sdk, model, prompt, temperature=1.0, top_p=0.95, seed=seed).choices[0]
        assert logprobs_of(choice) == logprobs_of(alone)


def chat_logprobs(choice) -> list[tuple[str, float]]:
    return [(item.token, item.logprob) for item in choice.logprobs.content]


def test_a_predicted_output_verified_in_one_step_is_the_same_bits_as_plain_decodes(sdk, model, smollm2_tokenizer):
    """The prediction is the plain answer with a wrong token in its middle: its first part
    is accepted, scored in a step of many tokens, where a plain decode scores one a step."""
    request = {"model": model, "temperature": 0.0, "max_tokens": 40, "logprobs": True,
               "messages": [{"role": "user", "content": "Describe a quiet harbor at dawn."}]}
    plain = sdk.chat.completions.create(**request).choices[0]
    answer = smollm2_tokenizer.encode(plain.message.content)
    predicted = smollm2_tokenizer.decode(answer[:12] + [answer[12] + 1] + answer[13:])
    with_draft = sdk.chat.completions.create(**request, prediction={"type": "content", "content": predicted})
    assert with_draft.usage.completion_tokens_details.accepted_prediction_tokens >= 8
    assert chat_logprobs(with_draft.choices[0]) == chat_logprobs(plain)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                   "required": ["city"]}}}]


def test_a_seeded_tool_call_is_the_same_streamed_and_unstreamed(sdk, model):
    request = {"model": model, "tools": TOOLS, "tool_choice": "required", "seed": 3, "max_tokens": 60,
               "logprobs": True, "messages": [{"role": "user", "content": "What is the weather in Lyon and Oslo?"}]}
    whole = sdk.chat.completions.create(**request).choices[0]
    calls, token_logprobs = {}, []
    for chunk in sdk.chat.completions.create(**request, stream=True):
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                name, arguments = calls.get(call.index, ("", ""))
                calls[call.index] = (name + (call.function.name or ""), arguments + (call.function.arguments or ""))
            if choice.logprobs is not None:
                token_logprobs += [(item.token, item.logprob) for item in choice.logprobs.content or ()]
    unstreamed = [(call.function.name, json.loads(call.function.arguments)) for call in whole.message.tool_calls]
    streamed = [(name, json.loads(arguments)) for _, (name, arguments) in sorted(calls.items())]
    assert unstreamed and streamed == unstreamed
    assert token_logprobs == chat_logprobs(whole)


def test_an_n_gram_draft_verified_in_one_step_is_the_same_bits_as_plain_decodes(sdk, model, state):
    """`--speculative ngram` for the duration (the engine's host-side drafting switched on in
    place): drafts looked up in the context are accepted, and the answer is plain decoding's."""
    request = {"model": model, "temperature": 0.0, "max_tokens": 48, "logprobs": True, "messages": [
        {"role": "user", "content": "Copy this list twice: red, green, blue, yellow, purple, orange, black."}]}
    plain = sdk.chat.completions.create(**request)
    engine = state.engine.engine
    speculation = engine.speculation
    engine.speculation = dataclasses.replace(speculation, ngram=True)
    try:
        drafted = sdk.chat.completions.create(**request)
    finally:
        engine.speculation = speculation
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
    assert drafted.usage.completion_tokens_details.accepted_prediction_tokens >= 8
    assert chat_logprobs(drafted.choices[0]) == chat_logprobs(plain.choices[0])
