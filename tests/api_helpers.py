"""Helpers for API tests: the tiny engine's settings and waiting for the engine to start."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from litestar.testing import TestClient

from engine.config import EngineConfig

# Two compiled shapes, not the default six: one token (a single stream's decode) and the
# step's whole budget (everything else, padded). Compiling a bucket takes seconds even for
# the tiny model, most of it in the sampler over the vocabulary, and the apps' tests send
# short requests that hardly feel the padding. The 64-token program is ONE_BUCKET_ENGINE's
# too, so the apps of either config share it through the compilation cache.
TINY_ENGINE = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, num_pages=160,
                           token_buckets=(1, 64))
# One compiled shape: for apps whose tests generate little.
ONE_BUCKET_ENGINE = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, num_pages=160,
                                 token_buckets=(64,))


def wait_until_serving(client: TestClient, timeout: float = 120) -> None:
    """Poll /health until the background engine load finishes."""
    deadline = time.monotonic() + timeout
    while (health := client.get("/health")).status_code != 200:
        assert health.json()["status"] != "failed", "the engine failed to load"
        assert time.monotonic() < deadline, "the engine did not start"
        time.sleep(0.05)


def rendered_ids(tokenizer, messages, prefill: str = "") -> list[int]:
    """The prompt ids of `messages` by the tokenizer's own chat template rendering, opening
    an assistant turn that starts with `prefill`: what a route's rendering of the equivalent
    request must equal."""
    return tokenizer.encode(tokenizer.render_chat(messages) + prefill, add_special_tokens=False)


@contextmanager
def live_app(app, timeout: float = 600) -> Iterator[str]:
    """`app` served by a real uvicorn on a free loopback port, in a thread of this process
    (the test client buffers whole responses and never sees a closed socket); yields its
    base URL once it is healthy, and stops it afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while not server.started or httpx.get(f"{base_url}/health", timeout=5).status_code != 200:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        assert app.state.server.phase != "failed", "the engine failed to load"
        time.sleep(0.1)
    try:
        yield base_url
    finally:
        server.should_exit = True
        thread.join(timeout=60)
