"""lm-eval-harness against the live server, as its users run it: the `local-completions` model
with no tokenizer of its own, which finds the server's tokenizer at /tokenizer_info,
/tokenize and /detokenize (its remote backend), on a small task written here.

The log-likelihoods it reports are checked against the engine's own prompt logprobs for the
same tokens, and its generations against the engine's own greedy continuation, so the test
fails if any step between them (tokenizing, echo logprobs, stop strings) goes wrong."""

from __future__ import annotations

import asyncio
import json
import math
import os
import uuid

import pytest

DOCS = [
    {"question": "Water freezes at zero degrees", "choices": [" Celsius", " Fahrenheit"], "answer": 0},
    {"question": "The opposite of hot is", "choices": [" cold", " warm"], "answer": 0},
    {"question": "Two plus two equals", "choices": [" five", " four"], "answer": 1},
]
MC_TASK = """task: flint_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
"""
GEN_TASK = """task: flint_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{choices[answer]}}}}"
generation_kwargs:
  until: ["."]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
"""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    directory = tmp_path_factory.mktemp("lm-eval-tasks")
    data = directory / "docs.jsonl"
    data.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    (directory / "flint_mc.yaml").write_text(MC_TASK.format(data=data))
    (directory / "flint_gen.yaml").write_text(GEN_TASK.format(data=data))
    return directory


@pytest.fixture(scope="module")
def results(live_server, tasks):
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from lm_eval.tasks import TaskManager

    model = LocalCompletionsAPI(base_url=f"{live_server}/v1/completions", model="SmolLM2-135M-Instruct",
                                num_concurrent=1, max_retries=1, max_length=1024)
    assert model.tokenizer_backend == "remote"  # found the server's tokenizer by itself
    return lm_eval.simple_evaluate(model=model, tasks=["flint_mc", "flint_gen"], log_samples=True,
                                   task_manager=TaskManager(include_path=str(tasks)))


def engine_run(state, prompt_ids: list[int], prompt_logprobs: int | None = None, **stop):
    """The outputs of one greedy request run on the live engine directly (no HTTP)."""
    from engine.host.request import Request, SamplingParams, StopCriteria

    async def run():
        request = Request(f"lm-eval-reference-{uuid.uuid4().hex}", prompt_ids,
                          SamplingParams(temperature=0, prompt_logprobs=prompt_logprobs), StopCriteria(**stop))
        return [output async for output in state.running_engine.generate(request)]

    return asyncio.run(run())


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's documented split: trailing spaces of the context move to the continuation,
    the whole is encoded and the context's tokens taken off its front."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer.encode(context + continuation, add_special_tokens=False)
    return whole[: len(tokenizer.encode(context, add_special_tokens=False))], \
        whole[len(tokenizer.encode(context, add_special_tokens=False)):]


def engine_loglikelihood(state, context: str, continuation: str) -> float:
    """The continuation's log-likelihood after the context, from the engine's prompt logprobs."""
    context_ids, continuation_ids = encode_pair(state.tokenizer, context, continuation)
    [output] = engine_run(state, context_ids + continuation_ids, prompt_logprobs=0, max_tokens=0)
    return sum(lp.logprob for lp in output.prompt_logprobs[len(context_ids) - 1:])


def test_loglikelihoods_equal_the_engines_prompt_logprobs(results, live_state):
    samples = results["samples"]["flint_mc"]
    assert sorted(sample["doc"]["question"] for sample in samples) == sorted(doc["question"] for doc in DOCS)
    num_right = 0
    for sample in samples:
        expected = [engine_loglikelihood(live_state, context, continuation)
                    for context, continuation in sample["arguments"]]
        reported = [reported for ((reported, _),) in sample["resps"]]
        assert reported == pytest.approx(expected, abs=2e-3) and all(map(math.isfinite, reported))
        # The engine's own pick, clear of the tolerance, so that lm-eval's must be the same.
        best, runner_up = sorted(expected, reverse=True)[:2]
        assert best - runner_up > 4e-3, expected
        num_right += expected.index(best) == sample["doc"]["answer"]
    # lm-eval's accuracy is the fraction of docs whose right choice the engine likes best.
    assert results["results"]["flint_mc"]["acc,none"] == pytest.approx(num_right / len(DOCS))


def test_generations_equal_the_engines_greedy_continuation(results, live_state):
    tokenizer = live_state.tokenizer
    for sample in results["samples"]["flint_gen"]:
        context = sample["arguments"][0][0]
        [generated] = sample["resps"][0]
        outputs = engine_run(live_state, tokenizer.encode(context, add_special_tokens=False),
                             max_tokens=8, strings=(".",))
        assert generated == "".join(output.text for output in outputs)
