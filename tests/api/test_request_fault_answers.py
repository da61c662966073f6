"""A fault tied to one request (engine/host/faults.py) answers that request with a 500 in its
dialect's shape, whole or streamed, while a request beside it is served as if alone, and
the server goes on serving. (A device fault stopping the server: test_engine_failure.py.)"""

from __future__ import annotations

import json
import threading

import pytest

from engine.host import window_output

MODEL = "SmolLM2-135M-Instruct"
MARK = "FAULT"  # a prompt holding this fails in the output stage, at its third token


class InjectedFault(RuntimeError):
    pass


@pytest.fixture
def faulty_outputs(client, monkeypatch):
    """The app's output stage raises for every sequence whose prompt holds MARK, once it has
    streamed its first tokens: token by token, or where a decode window lands its row at once."""
    engine = client.app.state.server.running_engine.engine
    original, original_row = engine.output._advance, window_output.land_row

    def failing(seq, num_output_tokens: int) -> None:
        if num_output_tokens >= 3 and MARK in engine.tokenizer.decode(seq.prompt_token_ids):
            raise InjectedFault("a tokenizer edge case")

    def advance(seq, logprob):
        failing(seq, seq.num_output_tokens)  # its newest token appended
        return original(seq, logprob)

    def land_row(stage, seq, tokens, *args):  # a decode window's row, its tokens not yet appended
        failing(seq, seq.num_output_tokens + len(tokens))
        return original_row(stage, seq, tokens, *args)

    monkeypatch.setattr(engine.output, "_advance", advance)
    monkeypatch.setattr(window_output, "land_row", land_row)
    return engine


def chat(client, content: str, **fields):
    return client.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": content}],
                                                     "max_tokens": 8, "temperature": 0, **fields})


def assert_serving(client) -> None:
    assert client.get("/health").status_code == 200
    served = client.app.state.server.running_engine
    assert served.is_alive and served.num_in_flight == 0
    assert chat(client, "Hi").status_code == 200


def test_a_failed_chat_completion_is_a_500_in_openai_shape(client, faulty_outputs):
    answer = chat(client, f"{MARK} now", ignore_eos=True)
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert error["type"] == "server_error" and "this request" in error["message"]
    assert_serving(client)


def test_a_failed_message_is_a_500_in_anthropic_shape(client, faulty_outputs):
    answer = client.post("/v1/messages", json={"model": MODEL, "max_tokens": 8,
                                               "messages": [{"role": "user", "content": f"{MARK} now"}]})
    assert answer.status_code == 500
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    assert_serving(client)


def test_a_failed_stream_ends_with_an_error_event(client, faulty_outputs):
    answer = chat(client, f"{MARK} now", stream=True, ignore_eos=True)
    events = [line.removeprefix("data: ") for line in answer.text.splitlines() if line.startswith("data: ")]
    assert answer.status_code == 200 and events[-1] == "[DONE]"
    assert json.loads(events[0])["choices"][0]["delta"]  # it had begun
    assert json.loads(events[-2])["error"]["type"] == "server_error"
    assert_serving(client)


def test_a_request_beside_the_failed_one_is_served_as_if_alone(client, faulty_outputs):
    alone = chat(client, "Tell me about rivers", max_tokens=24, ignore_eos=True).json()["choices"][0]["message"]
    answers = {}
    threads = [threading.Thread(target=lambda: answers.update(bad=chat(client, f"{MARK} now", max_tokens=24,
                                                                     ignore_eos=True))),
               threading.Thread(target=lambda: answers.update(good=chat(client, "Tell me about rivers", max_tokens=24,
                                                                       ignore_eos=True)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert answers["bad"].status_code == 500
    assert answers["good"].status_code == 200 and answers["good"].json()["choices"][0]["message"] == alone
    assert_serving(client)
