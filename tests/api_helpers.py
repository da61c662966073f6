"""Helpers for API tests: the tiny engine's settings and waiting for the engine to start."""

from __future__ import annotations

import time

from litestar.testing import TestClient

from engine.config import EngineConfig

TINY_ENGINE = EngineConfig(max_model_len=256, max_num_seqs=8, max_num_batched_tokens=64, num_pages=160)
# One compiled shape instead of six: for apps whose tests generate little (compiling each
# bucket takes seconds even for the tiny model, most of it in the sampler over the vocabulary).
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
