"""A live server for end-to-end tests: uvicorn on a free loopback port, in a background
thread of the test process, serving the embedded SmolLM2-135M-Instruct.

One server per session, shared by every module that asks for `live_server` (its base URL);
`live_state` gives the server's ServerState, to look at the engine from the test. The
engine is small (16 sequences, four compiled token buckets) to keep start-up short, and
otherwise serves as `flint serve` does: quantization, cache dtype and CPU kernels left to
"auto" (int8 weights through the native kernels, values cached in float8, where they are
built), so every live test runs the path users run (tests/e2e/test_served_defaults_live.py
checks it is that path)."""

from __future__ import annotations

from dataclasses import dataclass

import openai
import pytest
from api_helpers import live_app

from api.core.state import ServerState
from api.server.app import create_app
from api.server.settings import Settings
from engine.config import AUTO, EngineConfig

# Buckets: 1 and 8 for the decodes of one stream and of a few choices, 32 and 128 for
# prompts. A step's cost on the CPU follows its bucket's rows (a one-row step is a
# matrix-vector product), so the decodes most tests run would take several times longer in
# the 32 bucket; each bucket costs a few seconds of compile, once.
LIVE_ENGINE = EngineConfig(max_model_len=1024, max_num_seqs=16, max_num_batched_tokens=128,
                           token_buckets=(1, 8, 32, 128), num_pages=400, quantization=AUTO)
START_TIMEOUT = 900  # seconds: compiling SmolLM2 on a busy 2-core machine is slow


@dataclass(frozen=True)
class LiveServer:
    base_url: str
    state: ServerState


@pytest.fixture(scope="session")
def live(smollm2_checkpoint, tmp_path_factory) -> LiveServer:
    # Stored chat completions and responses go to a SQLite store of this session's own.
    app = create_app(Settings(engine=LIVE_ENGINE, data_dir=str(tmp_path_factory.mktemp("live-data"))))
    with live_app(app, timeout=START_TIMEOUT) as base_url:
        yield LiveServer(base_url, app.state.server)


@pytest.fixture(scope="session")
def live_server(live) -> str:
    """The live server's base URL (http://127.0.0.1:PORT; the API is under /v1)."""
    return live.base_url


@pytest.fixture(scope="session")
def live_state(live) -> ServerState:
    return live.state


@pytest.fixture(scope="session")
def sdk(live_server) -> openai.OpenAI:
    """The `openai` SDK pointed at the live server (modules may define their own `sdk`)."""
    return openai.OpenAI(base_url=f"{live_server}/v1", api_key="not-needed", max_retries=0)
