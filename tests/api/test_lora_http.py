"""LoRA adapters through HTTP: `--lora` at start-up, vLLM's load and unload routes, `model`
naming an adapter, /v1/models listing each with its parent, concurrent requests of several
adapters and the base, the prefix cache of an adapter replaced in place, unloading under load,
and structured output under an adapter. Tokens are checked against the NumPy forward of the
merged weights W + scale B A (tests/lora_files.py); under a grammar, with llguidance's own
matcher choosing the allowed tokens."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import llguidance
import numpy as np
import openai
import pytest
from api_helpers import ONE_BUCKET_ENGINE, live_app, rendered_ids
from lora_files import merged_params, random_adapter, write_adapter
from numpy_reference import forward, greedy

from api.server.app import create_app
from api.server.settings import Settings
from engine.engine import Engine
from engine.loader.checkpoint import Checkpoint
from engine.loader.source import ModelSource
from engine.models.params import random_params
from tiny_models import tiny_checkpoint

RANK = 4
PROMPT = [5, 17, 3, 60, 22, 9, 41, 8, 13, 71, 2, 30]
MAX_TOKENS = 5
PAGE = ONE_BUCKET_ENGINE.page_size
# Three full pages before the last token: what the prefix cache can hand a later request.
LONG_PROMPT = [(11 * i) % 3000 + 100 for i in range(3 * PAGE + 5)]
CACHED = (len(LONG_PROMPT) - 1) // PAGE * PAGE
# Streams long enough (seconds on the tiny model) to be running still when the unload lands.
UNLOAD_STREAMS, UNLOAD_STREAM_TOKENS = 4, 200


@pytest.fixture(scope="module")
def world(tmp_path_factory, smollm2_tokenizer):
    """The tiny base over SmolLM2's vocabulary, three adapters on disk with their merged
    weights, and a live server started with `--lora a0=...` and two slots."""
    config = tiny_checkpoint(96).config.replace(vocab_size=smollm2_tokenizer.vocab_size)
    base = Checkpoint(config, random_params(config, seed=6),
                      ModelSource(id="tiny-base", path=None, format="hf", context_length=512))
    root = tmp_path_factory.mktemp("adapters")
    paths, merged = {}, {}
    for seed in range(3):
        pairs = random_adapter(config, RANK, seed=30 + seed, magnitude=1.0)
        paths[f"a{seed}"] = str(write_adapter(root / f"a{seed}", pairs, RANK, 8.0))
        merged[f"a{seed}"] = merged_params(base.params, pairs, 8.0 / RANK)

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(base, smollm2_tokenizer, settings.engine)
        engine.runner.warmup()
        return engine

    engine = dataclasses.replace(ONE_BUCKET_ENGINE, optimize_compiled_code=False, max_loras=2, max_lora_rank=8)
    app = create_app(Settings(engine=engine, lora_modules=(("a0", paths["a0"]),), allow_runtime_lora=True),
                     engine_factory=engine_factory)
    with live_app(app) as base_url:
        sdk = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
        merged[app.state.server.model.id] = base.params  # the embedded model's id names the tiny base here
        yield config, paths, merged, sdk, base_url, app


def expected_text(world, name, tokenizer, prompt=PROMPT) -> str:
    config, _, merged, *_ = world
    return tokenizer.decode(greedy(config, merged[name], prompt, MAX_TOKENS))


def complete(sdk, model: str, prompt=PROMPT):
    return sdk.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                  extra_body={"ignore_eos": True})


def cached_tokens(completion) -> int:
    details = completion.usage.prompt_tokens_details
    return details.cached_tokens if details is not None else 0


def post(base_url: str, route: str, body: dict) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/{route}", json=body, timeout=60)


def test_an_adapter_named_at_start_up_serves_and_is_listed_with_its_parent(world, smollm2_tokenizer):
    _, _, _, sdk, _, app = world
    base_id = app.state.server.model.id
    models = {model.id: model for model in sdk.models.list().data}
    assert set(models) == {base_id, "a0"}
    assert models["a0"].model_extra["parent"] == base_id
    assert models[base_id].model_extra["parent"] is None
    completion = complete(sdk, "a0")
    assert completion.model == "a0"
    assert completion.choices[0].text == expected_text(world, "a0", smollm2_tokenizer)
    assert sdk.models.retrieve("a0").id == "a0"


def test_an_adapter_loaded_at_run_time_serves_by_name(world, smollm2_tokenizer):
    _, paths, _, sdk, base_url, _ = world
    answer = post(base_url, "load_lora_adapter", {"lora_name": "a1", "lora_path": paths["a1"]})
    assert answer.status_code == 200 and "a1" in answer.text
    assert "a1" in {model.id for model in sdk.models.list().data}
    chat = sdk.chat.completions.create(model="a1", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert chat.model == "a1"
    assert complete(sdk, "a1").choices[0].text == expected_text(world, "a1", smollm2_tokenizer)
    again = post(base_url, "load_lora_adapter", {"lora_name": "a1", "lora_path": paths["a1"]})
    assert again.status_code == 400 and again.json()["error"]["param"] == "lora_name"


def test_concurrent_requests_of_three_adapters_and_the_base_each_get_their_own(world, smollm2_tokenizer):
    """Two slots for three adapters: the batches mix adapters and the base, one adapter
    waits for a slot, and every answer is its own adapter's."""
    _, paths, _, sdk, base_url, app = world
    post(base_url, "load_lora_adapter", {"lora_name": "a1", "lora_path": paths["a1"], "load_inplace": True})
    post(base_url, "load_lora_adapter", {"lora_name": "a2", "lora_path": paths["a2"], "load_inplace": True})
    names = ["a0", "a1", "a2", app.state.server.model.id] * 2
    expected = {name: expected_text(world, name, smollm2_tokenizer) for name in set(names)}
    assert len(set(expected.values())) == len(expected)  # a request served another's weights would show
    slots = app.state.server.running_engine.engine.adapters
    evictions_before = slots.num_evictions
    with ThreadPoolExecutor(len(names)) as pool:
        texts = list(pool.map(lambda name: complete(sdk, name).choices[0].text, names))
    for name, text in zip(names, texts):
        assert text == expected[name], name
    # Three adapters in two slots: these requests themselves made at least one adapter wait
    # for another's slot (the counter's earlier value is other tests').
    assert slots.num_evictions - evictions_before >= 1 and slots.holders == [0, 0]
    scraped = httpx.get(f"{base_url}/metrics").text
    assert f"flint:lora_adapter_evictions_total {float(slots.num_evictions)}" in scraped
    assert 'vllm:lora_requests_info{engine="0",max_lora="2"' in scraped


def test_load_inplace_replaces_and_its_kv_is_not_shared(world, smollm2_tokenizer):
    """The same name, other weights: the prompt's cached pages of the old weights are not
    reused. A prompt of several pages, which under the unchanged adapter does hit the cache
    (so the miss after the reload is the reload's doing)."""
    _, paths, _, sdk, base_url, _ = world
    post(base_url, "load_lora_adapter", {"lora_name": "swap", "lora_path": paths["a1"]})
    first, again = complete(sdk, "swap", LONG_PROMPT), complete(sdk, "swap", LONG_PROMPT)
    assert (cached_tokens(first), cached_tokens(again)) == (0, CACHED)
    assert first.choices[0].text == again.choices[0].text == expected_text(world, "a1", smollm2_tokenizer, LONG_PROMPT)
    answer = post(base_url, "load_lora_adapter", {"lora_name": "swap", "lora_path": paths["a2"], "load_inplace": True})
    assert answer.status_code == 200
    replaced = complete(sdk, "swap", LONG_PROMPT)
    assert cached_tokens(replaced) == 0
    assert replaced.choices[0].text == expected_text(world, "a2", smollm2_tokenizer, LONG_PROMPT)
    assert cached_tokens(complete(sdk, "swap", LONG_PROMPT)) == CACHED  # the new weights' pages are its own


def test_unloading_under_load_loses_no_request(world):
    """Streams under an adapter that is unloaded mid-way all finish, with the tokens they would
    have had; a later request is a 404. The unload goes out once every stream has its first
    token, and answers before any of them has ended."""
    _, paths, _, sdk, base_url, app = world
    post(base_url, "load_lora_adapter", {"lora_name": "gone", "lora_path": paths["a2"]})
    request = dict(model="gone", prompt=PROMPT, max_tokens=UNLOAD_STREAM_TOKENS, temperature=0,
                   extra_body={"ignore_eos": True})
    unloaded_text = sdk.completions.create(**request).choices[0].text  # what each stream must still say
    started = threading.Barrier(UNLOAD_STREAMS + 1, timeout=120)  # every stream and this thread

    def stream() -> tuple[str | None, str, float]:
        """The stream's finish reason, its text, and when its last chunk came."""
        chunks = []
        for chunk in sdk.completions.create(**request, stream=True):
            chunks.append(chunk)
            if len(chunks) == 1:
                started.wait()
        return chunks[-1].choices[0].finish_reason, "".join(chunk.choices[0].text for chunk in chunks), time.monotonic()

    with ThreadPoolExecutor(UNLOAD_STREAMS) as pool:
        streams = [pool.submit(stream) for _ in range(UNLOAD_STREAMS)]
        started.wait()
        answer = post(base_url, "unload_lora_adapter", {"lora_name": "gone"})
        answered, in_flight = time.monotonic(), app.state.server.running_engine.num_in_flight
        results = [future.result(timeout=120) for future in streams]
    assert answer.status_code == 200
    # The unload landed under load: the engine still owed every stream output, and each
    # stream's last chunk came after the unload's answer.
    assert in_flight == UNLOAD_STREAMS
    assert all(ended > answered for _, _, ended in results), "a stream ended before the unload landed"
    assert [reason for reason, _, _ in results] == ["length"] * UNLOAD_STREAMS
    assert [text for _, text, _ in results] == [unloaded_text] * UNLOAD_STREAMS
    with pytest.raises(openai.NotFoundError) as error:
        complete(sdk, "gone")
    assert error.value.body["param"] == "model"
    missing = post(base_url, "unload_lora_adapter", {"lora_name": "gone"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "lora_name"


@pytest.mark.parametrize(("body", "param"), [
    ({"lora_name": "bad", "lora_path": "/nonexistent/adapter"}, "lora_path"),
    ({"lora_name": "SmolLM2-135M-Instruct", "lora_path": "/nonexistent/adapter"}, "lora_name"),  # the base's id
    ({"lora_name": "bad"}, "lora_path"),
    ({"lora_name": "bad", "lora_path": "/x", "lora_int_id": 3}, "lora_int_id"),
])
def test_a_bad_adapter_is_a_400_naming_lora_path(world, body, param):
    _, _, _, _, base_url, _ = world
    answer = post(base_url, "load_lora_adapter", body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_an_adapter_of_too_high_a_rank_is_refused_naming_the_limit(world, tmp_path):
    config, _, _, _, base_url, _ = world
    path = write_adapter(tmp_path / "wide", random_adapter(config, 16, seed=1, targets=("q_proj",)), 16, 16.0)
    answer = post(base_url, "load_lora_adapter", {"lora_name": "wide", "lora_path": str(path)})
    assert answer.status_code == 400 and "max_lora_rank 8" in answer.json()["error"]["message"]


def constrained_greedy(config, params, prompt, schema: dict, tokenizer) -> list[int]:
    """The greedy answer of `params` under `schema`, apart from the engine's sampler and
    grammar code: llguidance's own matcher (the library the grammar comes from; JSON laid out
    as engine/text/grammar.py documents) allows the tokens, the NumPy forward scores them."""
    eos = tokenizer.eos_token_ids
    vocabulary = llguidance.LLTokenizer(tokenizer.to_json_str(), n_vocab=config.vocab_size, eos_token=list(eos))
    layout = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    matcher = llguidance.LLMatcher(vocabulary, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema),
                                                                                           defaults=layout))
    ids = list(prompt)
    while True:
        allowed = np.frombuffer(matcher.compute_logit_bias(), np.uint8) > 0
        token = int(np.argmax(np.where(allowed, forward(config, params, ids)[-1], -np.inf)))
        if token in eos:
            return ids[len(prompt):]
        assert matcher.consume_token(token), matcher.get_error()
        ids.append(token)


def test_structured_output_holds_under_an_adapter(world, smollm2_tokenizer):
    """The grammar masks the adapter's logits as it masks the base's: each answer is one of the
    enum, token for token the constrained greedy of its own weights, and the adapter's differs
    from the base's (so an adapter left out under the grammar would show)."""
    config, _, merged, sdk, _, app = world
    base_id = app.state.server.model.id
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
              "additionalProperties": False}
    response_format = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}
    messages = [{"role": "user", "content": "Yes or no?"}]
    prompt = rendered_ids(smollm2_tokenizer, messages)
    expected = {name: constrained_greedy(config, merged[name], prompt, schema, smollm2_tokenizer)
                for name in ("a0", base_id)}
    assert smollm2_tokenizer.decode(expected["a0"]) != smollm2_tokenizer.decode(expected[base_id])
    for name in ("a0", base_id):
        chat = sdk.chat.completions.create(model=name, messages=messages, max_tokens=40, temperature=0, logprobs=True,
                                           response_format=response_format)
        assert chat.model == name
        assert json.loads(chat.choices[0].message.content)["answer"] in ("yes", "no")
        assert chat.choices[0].message.content == smollm2_tokenizer.decode(expected[name]), name
        assert [entry.token for entry in chat.choices[0].logprobs.content] == [
            smollm2_tokenizer.decode([token]) for token in expected[name]], name


def test_the_load_routes_are_off_unless_the_server_allows_them(world):
    """Without --allow-runtime-lora any key holder would read the server's directories and
    replace what another tenant's adapter runs: a 403, and nothing changes."""
    _, paths, _, sdk, base_url, app = world
    server = app.state.server
    allowed = server.settings
    server.settings = dataclasses.replace(allowed, allow_runtime_lora=False)
    try:
        for route, body in (("load_lora_adapter", {"lora_name": "a0", "lora_path": paths["a1"], "load_inplace": True}),
                            ("unload_lora_adapter", {"lora_name": "a0"})):
            answer = post(base_url, route, body)
            assert answer.status_code == 403 and answer.json()["error"]["code"] == "runtime_lora_disabled"
    finally:
        server.settings = allowed
    assert "a0" in {model.id for model in sdk.models.list().data}
