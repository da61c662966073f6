"""Requests that Schemathesis, sending what the served contract describes (and what it does
not), found answered with a 5xx; each is now answered as the contract says
(tests/e2e/test_schemathesis_live.py runs it against the live server)."""

from __future__ import annotations

from contract_helpers import schema_errors
from responses_helpers import create


def test_a_responses_input_item_with_null_type_id_and_status_is_a_message(client):
    """The generated models accept null for every optional field: a null item `type` was a
    KeyError (500) when the server filled in the item's id."""
    item = {"type": None, "id": None, "status": None, "role": "user", "content": "Say hi"}
    response = create(client, input=[item], store=True)
    [stored] = client.get(f"/v1/responses/{response['id']}/input_items").json()["data"]
    assert stored["type"] == "message" and stored["id"].startswith("msg_") and stored["status"] == "completed"
    assert stored["content"] == [{"type": "input_text", "text": "Say hi"}]


def test_an_echoed_prompts_null_first_logprob_is_in_the_served_contract(client):
    """The first echoed prompt token has no logprob (null, as OpenAI and vLLM report it),
    which Fireworks' logprobs schema does not allow: the served contract does."""
    contract = client.get("/openapi.json").json()
    for logprobs in (2, True):  # the legacy lists, and the content entries
        response = client.post("/v1/completions", json={"prompt": "Say hi", "max_tokens": 2, "echo": True,
                                                         "logprobs": logprobs})
        assert response.status_code == 200, response.text
        answer = response.json()
        first = answer["choices"][0]["logprobs"]
        assert (first["token_logprobs"][0] if logprobs is not True else first["content"][0]["logprob"]) is None
        assert schema_errors(contract, {"$ref": "#/components/schemas/FlintCompletionResponse"}, answer) == []
