"""Work that takes seconds never runs on the event loop: while a huge body is tokenized, a
long conversation rendered or a huge prediction refused, /health and other requests keep
answering. Against the live server (tests/e2e/conftest.py), whose event loop is a real
uvicorn one. (tests/api/test_reading_off_the_loop.py and test_prediction.py check that the
work that grows with a body runs in worker threads, where no stall is measurable here.)"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

TEXT = "tokenize me please, " * 150_000  # about 3 MiB: seconds of tokenizing on this machine
MODEL_ID = "SmolLM2-135M-Instruct"
HI = [{"role": "user", "content": "Hi"}]


def slowest_health_while(base_url: str, work) -> float:
    """The longest /health round trip while `work()` runs in another thread."""
    worker = threading.Thread(target=work)
    worker.start()
    slowest = 0.0
    with httpx.Client(base_url=base_url, timeout=30) as client:
        while worker.is_alive():
            started = time.monotonic()
            assert client.get("/health").status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.02)
    worker.join()
    return slowest


@pytest.mark.parametrize("path, body", [
    ("/tokenize", {"prompt": TEXT}),
    ("/v1/tokenize", {"messages": [{"role": "user", "content": TEXT}]}),
])
def test_tokenizing_a_huge_body_never_stalls_health(live_server, path, body):
    # A first small request on the same route, so that nothing but this body's work is measured.
    assert httpx.post(f"{live_server}{path}", json={"prompt": "warm up"}, timeout=60).status_code == 200
    result = {}

    def tokenize():
        started = time.monotonic()
        result["response"] = httpx.post(f"{live_server}{path}", json=body, timeout=120)
        result["seconds"] = time.monotonic() - started

    slowest = slowest_health_while(live_server, tokenize)
    assert result["response"].status_code == 200 and result["response"].json()["count"] > 300_000
    assert result["seconds"] > 1.0  # long enough that a stalled loop would show
    assert slowest < 0.5, f"/health waited {slowest:.2f} s behind the tokenizer"


@pytest.mark.parametrize("path, name, predicting", [
    ("/v1/chat/completions", "prediction", lambda text: {"messages": HI,
                                                        "prediction": {"type": "content", "content": text}}),
    ("/v1/chat/completions", "speculation", lambda text: {"messages": HI, "speculation": text}),
    ("/v1/completions", "prediction", lambda text: {"prompt": "Hi", "prediction": text}),
], ids=["chat-prediction", "chat-speculation", "completions-prediction"])
def test_a_huge_prediction_never_stalls_health(live_server, path, name, predicting):
    """TEXT as the predicted output cannot fit the context window: it is refused (400) before
    it is encoded, and whatever is done with it is done off the loop. Encoding it on the
    loop stalled /health for seconds."""

    def post(text: str) -> httpx.Response:
        return httpx.post(f"{live_server}{path}", json={"model": MODEL_ID, "max_tokens": 1, **predicting(text)},
                          timeout=120)

    assert post("Hi").status_code == 200  # first a small one, so that only the huge one's work is measured
    result = {}
    slowest = slowest_health_while(live_server, lambda: result.update(response=post(TEXT)))
    assert result["response"].status_code == 400, result["response"].text
    assert result["response"].json()["error"]["param"] == name
    assert slowest < 0.5, f"/health waited {slowest:.2f} s behind the prediction"
