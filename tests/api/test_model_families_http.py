"""Every family beyond the plain Llama serves through HTTP with the openai SDK: a tiny random
Gemma 3, Gemma 2, windowed Mistral, Qwen3-MoE and Mixtral, each written as a Hugging Face checkpoint
and loaded by `flint serve`'s own loader, answer greedy completions and stream chat with the
tokens an independent NumPy forward predicts."""

from __future__ import annotations

import base64
import dataclasses

import numpy as np
import openai
import pytest
from api_helpers import ONE_BUCKET_ENGINE, rendered_ids, wait_until_serving
from family_configs import FAMILIES, MOE
from gemma_reference import greedy as gemma_greedy
from moe_reference import greedy as moe_greedy
from moe_reference import routed_forward
from litestar.testing import TestClient
from loader_files import write_hf
from numpy_reference import greedy as llama_greedy

from api.server.app import create_app
from api.server.settings import Settings
from engine.engine import Engine
from engine.loader.checkpoint import load_checkpoint
from engine.models.params import random_params

GREEDY = {"gemma2": gemma_greedy, "gemma3": gemma_greedy, "mistral": llama_greedy, "qwen3_moe": moe_greedy,
          "mixtral": moe_greedy}
CONFIGS = {**FAMILIES, **MOE}


@pytest.fixture(scope="module", params=["gemma3", "gemma2", "mistral", "qwen3_moe", "mixtral"])
def served(request, tmp_path_factory, smollm2_tokenizer):
    """(family, config, weights, SDK client, model id) of an app serving that family."""
    name = request.param
    config = CONFIGS[name].replace(vocab_size=smollm2_tokenizer.vocab_size,
                                   final_logit_softcapping=CONFIGS[name].final_logit_softcapping and 30.0)
    params = random_params(config, seed=4)
    checkpoint = load_checkpoint(str(write_hf(tmp_path_factory.mktemp(name) / f"tiny-{name}", config, params, name)))

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(checkpoint, smollm2_tokenizer, settings.engine)
        engine.runner.warmup()
        return engine

    # XLA's optimizations off: the app's one bucket compiles in about half the time, and these
    # tests generate a few tokens.
    settings = Settings(engine=dataclasses.replace(ONE_BUCKET_ENGINE, optimize_compiled_code=False))
    with TestClient(app=create_app(settings, engine_factory=engine_factory)) as client:
        wait_until_serving(client, timeout=600)
        sdk = openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client, max_retries=0)
        yield name, config, params, sdk, sdk.models.list().data[0].id


def test_greedy_completions_are_the_reference_s_tokens(served, smollm2_tokenizer):
    name, config, params, sdk, model = served
    prompt = [int(t) for t in np.random.default_rng(2).integers(0, config.vocab_size, 21)]  # longer than the windows
    completion = sdk.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0,
                                        extra_body={"ignore_eos": True})
    expected = GREEDY[name](config, params, prompt, 8)
    assert completion.choices[0].text == smollm2_tokenizer.decode(expected)
    assert completion.usage.completion_tokens == 8


def test_chat_streams(served, smollm2_tokenizer):
    """A streamed greedy chat says what the NumPy forward predicts after the chat template's
    prompt, and what the same request unstreamed says."""
    name, config, params, sdk, model = served
    messages = [{"role": "user", "content": "Hello there"}]
    request = dict(model=model, messages=messages, max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    chunks = list(sdk.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    expected = smollm2_tokenizer.decode(GREEDY[name](config, params, rendered_ids(smollm2_tokenizer, messages), 6))
    assert chunks[-1].usage.completion_tokens == 6
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == expected
    assert sdk.chat.completions.create(**request).choices[0].message.content == expected


def decode_matrix(matrix: str, config) -> np.ndarray:
    """README.md's routing matrix: base64 of one byte per expert id, layer by layer."""
    return np.frombuffer(base64.b64decode(matrix), np.uint8).reshape(config.num_layers, config.num_experts_per_tok)


def echoed_content(sdk, model, prompt, max_tokens, **extra):
    completion = sdk.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, echo=True,
                                        logprobs=True, extra_body={"ignore_eos": True, "top_logprobs": 1, **extra})
    return completion.choices[0].logprobs.content


def test_moe_logprobs_carry_routing_matrices_that_replay(served):
    """A mixture of experts' content logprobs carry each token's routing matrix, as the NumPy
    forward routes the tokens; handed back with other experts, the prompt's logprobs are
    those of the forward on those experts. Other families leave routing_matrix null."""
    name, config, params, sdk, model = served
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, config.vocab_size, 12)]
    content = echoed_content(sdk, model, prompt, 3)
    if name not in MOE:
        assert all(entry["routing_matrix"] is None for entry in content)
        return
    tokens = [entry["token_id"] for entry in content]
    _, routing = routed_forward(config, params, tokens)
    assert content[0]["routing_matrix"] is None  # the first token has no forward before it
    for position, entry in enumerate(content[1:], start=1):
        np.testing.assert_array_equal(decode_matrix(entry["routing_matrix"], config), routing[position - 1])

    # The round trip: the generation appended to the prompt, its own matrices handed back
    # as they came. Every token scores as it did, and the generated ones are again the
    # most likely (greedy) at their places.
    own = [entry["routing_matrix"] for entry in content[1:]]
    replayed = echoed_content(sdk, model, tokens, 0, routing_matrices=own)
    assert [entry["routing_matrix"] for entry in replayed] == [None, *own]
    assert [entry["logprob"] for entry in replayed[1:]] == pytest.approx([entry["logprob"] for entry in content[1:]],
                                                                          abs=1e-4)
    for entry in replayed[len(prompt):]:
        assert entry["top_logprobs"][0]["token_id"] == entry["token_id"]

    # Every prompt token sent to other experts: each layer's picks shifted by one.
    shifted = [(decode_matrix(entry["routing_matrix"], config).astype(int) + 1) % config.num_experts
               for entry in content[1:len(prompt) + 1]]
    matrices = [base64.b64encode(matrix.astype(np.uint8).tobytes()).decode() for matrix in shifted]
    replayed = echoed_content(sdk, model, prompt, 1, routing_matrices=matrices)
    logits, routing = routed_forward(config, params, prompt, [tuple(matrix.reshape(-1)) for matrix in shifted])
    expected = logits - logits.max(-1, keepdims=True)
    expected -= np.log(np.exp(expected).sum(-1, keepdims=True))
    for position in range(1, len(prompt)):
        entry = replayed[position]
        assert entry["routing_matrix"] == matrices[position - 1]
        assert entry["logprob"] == pytest.approx(expected[position - 1, prompt[position]], abs=1e-3)
    assert replayed[len(prompt)]["token_id"] == int(np.argmax(logits[-1]))
    # Another route is another function: the prompt scores otherwise than under its own.
    changed = [abs(replayed[j]["logprob"] - content[j]["logprob"]) > 1e-3 for j in range(1, len(prompt))]
    assert sum(changed) >= len(changed) // 2


def test_routing_matrices_that_cannot_apply_are_a_400_naming_them(served):
    name, config, _, sdk, model = served
    prompt = [1, 2, 3]
    cases = [([base64.b64encode(b"\0").decode()], "routing_matrices")]
    if name in MOE:
        layers, k = config.num_layers, config.num_experts_per_tok
        cases = [(["not base64!"], "routing_matrices[0]"),
                 ([None, base64.b64encode(bytes(layers * k)).decode()], "routing_matrices[1]"),  # one expert k times
                 ([base64.b64encode(bytes(range(k)) * layers).decode()] * 4, "routing_matrices")]  # past the prompt
    for matrices, param in cases:
        with pytest.raises(openai.BadRequestError) as raised:
            sdk.completions.create(model=model, prompt=prompt, max_tokens=1, extra_body={"routing_matrices": matrices})
        assert raised.value.body["param"] == param, raised.value.body
