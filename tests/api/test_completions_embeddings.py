"""Friendli's `token_index_to_replace` / `embedding_to_replace` through /v1/completions and
/serverless/v1/completions on the tiny-model app: the replaced prompt answers exactly as the
prompt holding the tokens whose embeddings were sent, and every malformed replacement is a
400 naming its field."""

from __future__ import annotations

import pytest

from api.completions import plan
from completions_helpers import complete
from loop_helpers import watch_where_called
from tiny_models import tiny_checkpoint

PROMPT = [17, 305, 9021, 44, 1207, 88, 3190, 512, 77, 4000, 12, 901]
SWAPS = {2: 1500, 7: 2600}  # prompt position -> the token whose embedding replaces it


@pytest.fixture(scope="module")
def embed(tokenizer):
    return tiny_checkpoint(tokenizer.vocab_size).params["embed"]  # the app's tiny weights


def greedy_body(tokens: list[int], **fields) -> dict:
    return {"tokens": tokens, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "include_output_logits": True,
            **fields}


def replacement_fields(embed, swaps: dict[int, int]) -> dict:
    return {"token_index_to_replace": list(swaps),
            "embedding_to_replace": [float(v) for token in swaps.values() for v in embed[token]]}


@pytest.mark.parametrize("path", ["/v1/completions", "/serverless/v1/completions"])
def test_a_replaced_embedding_answers_like_its_token(client, embed, path):
    swapped = [SWAPS.get(position, token) for position, token in enumerate(PROMPT)]
    replaced = complete(client, path, **greedy_body(PROMPT, **replacement_fields(embed, SWAPS)))["choices"][0]
    expected = complete(client, path, **greedy_body(swapped))["choices"][0]
    plain = complete(client, path, **greedy_body(PROMPT))["choices"][0]
    assert replaced["tokens"] == expected["tokens"] and replaced["text"] == expected["text"]
    assert replaced["logits"] == pytest.approx(expected["logits"], abs=1e-4)
    assert replaced["logits"] != pytest.approx(plain["logits"], abs=1e-3)


def test_every_choice_of_a_replaced_prompt_gets_the_replacement(client, embed):
    swapped = [SWAPS.get(position, token) for position, token in enumerate(PROMPT)]
    body = {**greedy_body(PROMPT, **replacement_fields(embed, SWAPS)), "n": 2, "temperature": 1.0, "seed": 4}
    assert complete(client, **body)["choices"] == complete(client, **{**body, "tokens": swapped,
                                                                      "token_index_to_replace": None,
                                                                      "embedding_to_replace": None})["choices"]


def bad(embed, **changes) -> dict:
    return {**greedy_body(PROMPT, **replacement_fields(embed, {3: 10})), **changes}


@pytest.mark.parametrize("changes, field, words", [
    ({"embedding_to_replace": [0.5] * 31}, "embedding_to_replace", "hidden size 32"),
    ({"embedding_to_replace": [0.5] * 64}, "embedding_to_replace", "hidden size 32"),
    ({"token_index_to_replace": [3, 4]}, "embedding_to_replace", "hidden size 32"),
    ({"token_index_to_replace": [12]}, "token_index_to_replace", "outside the prompt"),
    ({"token_index_to_replace": [-1]}, "token_index_to_replace", "outside the prompt"),
    ({"token_index_to_replace": [3, 3], "embedding_to_replace": [0.5] * 64}, "token_index_to_replace",
     "more than once"),
    ({"token_index_to_replace": None}, "token_index_to_replace", "needs"),
    ({"embedding_to_replace": None}, "embedding_to_replace", "needs"),
    ({"tokens": None, "prompt": [PROMPT, PROMPT]}, "token_index_to_replace", "one prompt"),
])
@pytest.mark.parametrize("path", ["/v1/completions", "/serverless/v1/completions"])
def test_a_malformed_replacement_is_a_400_naming_its_field(client, embed, path, changes, field, words):
    body = {key: value for key, value in bad(embed, **changes).items() if value is not None}
    response = client.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and words in error["message"]


def test_the_replacements_are_read_in_a_worker_thread(client, embed, monkeypatch):
    """The body limit allows millions of numbers, each checked and sliced into its vector:
    on the event loop that would stall every other request meanwhile."""
    calls = watch_where_called(monkeypatch, plan, "replaced_embeddings")
    complete(client, **greedy_body(PROMPT, **replacement_fields(embed, SWAPS)))
    assert calls == [False], "the replacements were read on the event loop"
