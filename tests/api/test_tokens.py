"""/v1/tokenize and /v1/detokenize against the tokenizer and chat template called directly.

The app's tokenizer is SmolLM2's with a post-processor that adds BOS (SmolLM2's own adds
nothing), so `add_special_tokens` makes a visible difference, and with a template variable
as Qwen3's templates have (`enable_thinking`), so `chat_template_kwargs` does too."""

from __future__ import annotations

import pytest
import tokenizers
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from litestar.testing import TestClient

from api.server.settings import Settings
from engine.text.gguf_vocab import special_tokens_processor
from engine.text.tokenizer import Tokenizer
from generated.flint import ErrorResponse, TokenizeResponse

CHAT = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "The answer is"}]
NO_THINKING = ("{% if add_generation_prompt and enable_thinking is defined and not enable_thinking %}"
               "<think></think>{% endif %}")


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer) -> Tokenizer:
    inner = tokenizers.Tokenizer.from_str(smollm2_tokenizer.to_json_str())
    bos = smollm2_tokenizer.id_to_token(smollm2_tokenizer.bos_token_id)
    inner.post_processor = special_tokens_processor(inner, bos, None)
    return Tokenizer(inner, bos_token_id=smollm2_tokenizer.bos_token_id,
                     eos_token_ids=smollm2_tokenizer.eos_token_ids,
                     chat_template=smollm2_tokenizer.chat_template + NO_THINKING)


@pytest.fixture(scope="module")
def client(tokenizer, tiny_app_factory):
    with TestClient(app=tiny_app_factory(Settings(engine=ONE_BUCKET_ENGINE), tokenizer)) as client:
        wait_until_serving(client)
        yield client


def tokenize(client, prefix="/v1", **body) -> TokenizeResponse:
    response = client.post(f"{prefix}/tokenize", json=body)
    assert response.status_code == 200, response.text
    return TokenizeResponse.model_validate(response.json())


def error_of(response, status: int):
    assert response.status_code == status, response.text
    return ErrorResponse.model_validate(response.json()).error


@pytest.mark.parametrize("prefix", ["/v1", "/inference/v1", ""])  # "": at the root, as vLLM serves it
def test_prompt_tokens_match_the_tokenizer(client, tokenizer, prefix):
    result = tokenize(client, prefix, prompt="Hello, world! Tokenize me.")
    assert result.tokens == tokenizer.encode("Hello, world! Tokenize me.")
    assert result.count == len(result.tokens)
    assert result.max_model_len == ONE_BUCKET_ENGINE.max_model_len
    assert result.token_strs is None


def test_add_special_tokens_adds_bos(client, tokenizer):
    with_bos = tokenize(client, prompt="Hello").tokens
    without = tokenize(client, prompt="Hello", add_special_tokens=False).tokens
    assert with_bos == [tokenizer.bos_token_id, *without]
    assert without == tokenizer.encode("Hello", add_special_tokens=False)


def test_token_strs_are_vocabulary_pieces(client, tokenizer):
    """As vLLM returns them: the vocabulary's spelling (`Ġworld`), not the decoded text."""
    result = tokenize(client, prompt="Hello, world!", add_special_tokens=False, return_token_strs=True)
    assert result.token_strs == [tokenizer.id_to_token(token) for token in result.tokens]
    assert "\u0120world" in result.token_strs and " world" not in result.token_strs
    chat = tokenize(client, messages=CHAT, return_token_strs=True)
    assert len(chat.token_strs) == chat.count


def test_chat_tokens_match_the_rendered_template(client, tokenizer):
    result = tokenize(client, messages=CHAT[:1])
    expected = tokenizer.render_chat(CHAT[:1], add_generation_prompt=True)
    assert result.tokens == tokenizer.encode(expected, add_special_tokens=False)
    assert tokenizer.decode(result.tokens).endswith("<|im_start|>assistant\n")


def test_chat_without_generation_prompt(client, tokenizer):
    result = tokenize(client, messages=CHAT[:1], add_generation_prompt=False)
    expected = tokenizer.render_chat(CHAT[:1], add_generation_prompt=False)
    assert result.tokens == tokenizer.encode(expected, add_special_tokens=False)
    assert not tokenizer.decode(result.tokens).endswith("assistant\n")


def test_chat_add_special_tokens_adds_bos(client, tokenizer):
    plain = tokenize(client, messages=CHAT[:1]).tokens
    assert tokenize(client, messages=CHAT[:1], add_special_tokens=True).tokens == [tokenizer.bos_token_id, *plain]


def test_continue_final_message_leaves_the_turn_open(client, tokenizer):
    result = tokenize(client, messages=CHAT, continue_final_message=True, add_generation_prompt=False)
    closed = tokenizer.render_chat(CHAT, add_generation_prompt=False)
    text = tokenizer.decode(result.tokens)
    assert text.endswith("<|im_start|>assistant\nThe answer is")
    assert closed.startswith(text) and len(closed) > len(text)
    # add_generation_prompt left at its default does not conflict with continuing.
    assert tokenize(client, messages=CHAT, continue_final_message=True).tokens == result.tokens


def test_continue_final_message_with_generation_prompt_is_400(client):
    response = client.post("/v1/tokenize", json={"messages": CHAT, "continue_final_message": True,
                                                 "add_generation_prompt": True})
    assert error_of(response, 400).param == "continue_final_message"


def test_chat_template_kwargs_reach_the_template(client, tokenizer):
    thinking = tokenize(client, messages=CHAT[:1]).tokens
    result = tokenize(client, messages=CHAT[:1], chat_template_kwargs={"enable_thinking": False}).tokens
    expected = tokenizer.render_chat(CHAT[:1], enable_thinking=False)
    assert result == tokenizer.encode(expected, add_special_tokens=False)
    assert result != thinking and expected.endswith("<think></think>")


def test_chat_template_kwargs_may_not_set_the_requests_own_fields(client):
    for name in ("messages", "add_generation_prompt"):
        body = {"messages": CHAT[:1], "chat_template_kwargs": {name: []}}
        assert error_of(client.post("/v1/tokenize", json=body), 400).param == "chat_template_kwargs"


def test_chat_content_parts_become_text(client):
    texts = [{"type": "text", "text": "What is"}, {"type": "text", "text": "2 + 2?"}]
    parts = [{"role": "user", "content": texts}]
    joined = [{"role": "user", "content": "What is\n2 + 2?"}]
    assert tokenize(client, messages=parts).tokens == tokenize(client, messages=joined).tokens


def test_another_model_is_404(client, tokenizer):
    served = client.get("/v1/models").json()["data"][0]["id"]
    assert tokenize(client, model=served, prompt="Hi").tokens == tokenizer.encode("Hi")
    bodies = [("tokenize", {"prompt": "Hi"}), ("tokenize", {"messages": CHAT}), ("detokenize", {"tokens": [1]})]
    for path, body in bodies:
        error = error_of(client.post(f"/v1/{path}", json={**body, "model": "gpt-17"}), 404)
        assert error.param == "model" and error.code == "model_not_found"


def test_detokenize_round_trips(client, tokenizer):
    text = "Hello, world! Ünïcödé too."
    for prefix in ("/v1", "/inference/v1"):
        tokens = tokenizer.encode(text, add_special_tokens=False)
        response = client.post(f"{prefix}/detokenize", json={"tokens": tokens})
        assert response.status_code == 200 and response.json() == {"prompt": text}


def test_detokenize_refuses_ids_outside_the_vocabulary(client, tokenizer):
    for token in (-1, tokenizer.vocab_size):
        error = error_of(client.post("/v1/detokenize", json={"tokens": [5, token]}), 400)
        assert error.param == "tokens" and str(token) in error.message


@pytest.mark.parametrize("body, param", [
    ({"prompt": "Hi", "bogus": 1}, "bogus"),
    ({"prompt": 5}, "prompt"),
    ({}, "prompt"),
    ({"messages": [{"content": "no role"}]}, "messages.[0].role"),
    ({"messages": CHAT, "prompt": "both"}, "prompt"),
])
def test_schema_violations_are_400_naming_the_field(client, body, param):
    error = error_of(client.post("/v1/tokenize", json=body), 400)
    assert error.type == "invalid_request_error" and error.param == param and param in error.message


def test_detokenize_schema_violation_is_400_naming_the_field(client):
    error = error_of(client.post("/v1/detokenize", json={"tokens": ["a"]}), 400)
    assert error.param == "tokens.[0]"
