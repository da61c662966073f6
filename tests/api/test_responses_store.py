"""Stored responses on the tiny-model app: retrieve, delete, input items, store: false, and
continuing a conversation with previous_response_id."""

from __future__ import annotations

from api_helpers import rendered_ids

from generated.flint import ResponseItemList
from responses_helpers import URL, create, greedy_text, output_text, refusal


def test_a_stored_response_is_retrieved_as_returned(client):
    response = create(client, metadata={"topic": "greeting", "turn": "1"})
    retrieved = client.get(f"{URL}/{response['id']}")
    assert retrieved.status_code == 200 and retrieved.json() == response
    assert retrieved.json()["metadata"] == {"topic": "greeting", "turn": "1"}
    assert client.get(f"/inference/v1/responses/{response['id']}").json() == response


def test_store_false_keeps_nothing(client):
    response = create(client, store=False)
    assert response["store"] is False
    missing = client.get(f"{URL}/{response['id']}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "response_not_found"
    error = refusal(client, 404, previous_response_id=response["id"])["error"]
    assert error["param"] == "previous_response_id"


def test_delete_removes_the_response(client):
    response_id = create(client)["id"]
    deleted = client.delete(f"{URL}/{response_id}")
    assert deleted.status_code == 200
    assert deleted.json() == {"id": response_id, "object": "response", "deleted": True}
    assert client.get(f"{URL}/{response_id}").status_code == 404
    assert client.delete(f"{URL}/{response_id}").status_code == 404
    assert client.get(f"{URL}/{response_id}/input_items").status_code == 404


def test_previous_response_id_puts_the_history_in_the_prompt(client, engine_requests, smollm2_tokenizer):
    first = create(client, instructions="Be brief.", input="Hello")
    second = create(client, previous_response_id=first["id"], input="And again?")
    # The history is the first turn's input and output; its instructions are not carried over.
    history = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": output_text(first)}]
    expected = rendered_ids(smollm2_tokenizer, [*history, {"role": "user", "content": "And again?"}])
    assert engine_requests[1].prompt_token_ids == expected
    assert second["usage"]["input_tokens"] == len(expected)
    assert second["previous_response_id"] == first["id"]
    assert output_text(second) == greedy_text(client, expected, 6)
    # The history travels with each stored response, so a third turn needs no earlier one.
    client.delete(f"{URL}/{first['id']}")
    third = create(client, previous_response_id=second["id"], input="Once more.")
    turns = [*history, {"role": "user", "content": "And again?"},
             {"role": "assistant", "content": output_text(second)}, {"role": "user", "content": "Once more."}]
    assert engine_requests[-1].prompt_token_ids == rendered_ids(smollm2_tokenizer, turns)
    assert third["usage"]["input_tokens"] == len(engine_requests[-1].prompt_token_ids)


def test_input_items_list_the_input_a_page_at_a_time(client):
    texts = ["one", "two", "three"]
    response = create(client, input=[{"role": "user", "content": text} for text in texts])
    url = f"{URL}/{response['id']}/input_items"
    newest_first = client.get(url).json()
    ResponseItemList.model_validate(newest_first)
    assert [item["content"] for item in newest_first["data"]] == \
        [[{"type": "input_text", "text": text}] for text in reversed(texts)]
    assert all(item["id"].startswith("msg_") and item["status"] == "completed" for item in newest_first["data"])
    first_page = client.get(url, params={"order": "asc", "limit": 2}).json()
    assert [item["content"][0]["text"] for item in first_page["data"]] == ["one", "two"]
    assert first_page["has_more"] is True and first_page["last_id"] == first_page["data"][-1]["id"]
    rest = client.get(url, params={"order": "asc", "after": first_page["last_id"]}).json()
    assert [item["content"][0]["text"] for item in rest["data"]] == ["three"] and rest["has_more"] is False
    unknown = client.get(url, params={"after": "msg_nothing"})
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "after"
    limit = client.get(url, params={"limit": 0})
    assert limit.status_code == 400 and limit.json()["error"]["param"] == "limit"
    for query in ({"include[]": "message.output_text.logprobs"}, {"include": "message.input_image.image_url"}):
        for path in (url, f"{URL}/{response['id']}"):
            refused = client.get(path, params=query)
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "include"


def test_input_items_keep_what_the_client_gave(client):
    earlier = {"type": "message", "id": "msg_given", "status": "incomplete", "role": "assistant",
               "content": [{"type": "output_text", "text": "Hi.", "logprobs": [
                   {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [
                       {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]}],
                   "annotations": [{"type": "url_citation", "url": "https://example.org", "title": "Ex",
                                    "start_index": 0, "end_index": 2}]}]}
    tool_result = {"type": "function_call_output", "id": "fco_given", "call_id": "call_1", "output": "42",
                   "status": "completed"}
    response = create(client, input=[earlier, tool_result, {"role": "user", "content": "Thanks"}])
    items = client.get(f"{URL}/{response['id']}/input_items", params={"order": "asc"}).json()["data"]
    assert items[0] == earlier and items[1] == tool_result
    assert items[2]["role"] == "user" and items[2]["content"] == [{"type": "input_text", "text": "Thanks"}]
