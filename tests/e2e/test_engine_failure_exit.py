"""`flint serve` whose engine dies mid-step: the request it was serving ends with an error,
and the process exits with status 1, so that a supervisor (systemd, Kubernetes) starts it
again instead of keeping a server that can no longer generate.

The fault is injected into a real engine step of the real process: a sitecustomize module
on the child's PYTHONPATH wraps ModelRunner.collect to raise on its third call."""

from __future__ import annotations

import os

import httpx
import pytest
from flint_process import SMALL_ENGINE_FLAGS, free_port, start_flint, wait_for_health, write_tiny_model

FAULT = '''
from engine.device import runner

_original, _calls = runner.ModelRunner.collect, []


def collect(self, flight):  # where a device error would surface
    _calls.append(len(flight.rows))
    if len(_calls) >= 3:
        raise RuntimeError("injected fault: a device error in the middle of a step")
    return _original(self, flight)


runner.ModelRunner.collect = collect
'''


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_checkpoint):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-model", smollm2_checkpoint)


def test_an_engine_that_dies_ends_its_request_and_the_process_with_status_1(tiny_model, tmp_path):
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(FAULT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "inject"), os.environ.get("PYTHONPATH", "")])}
    port, log_path = free_port(), tmp_path / "serve.log"
    process = start_flint(["--model", str(tiny_model), "--port", str(port), *SMALL_ENGINE_FLAGS], log_path, env)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base_url, process, log_path)
        response = httpx.post(f"{base_url}/v1/completions", json={"prompt": "Hello", "max_tokens": 20,
                                                                  "ignore_eos": True}, timeout=60)
        # Two tokens came before the fault: the choice ends marked as failed.
        assert response.status_code == 200 and response.json()["choices"][0]["finish_reason"] == "error"
        assert process.wait(timeout=60) == 1, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
    log = log_path.read_text()
    assert "injected fault" in log and "engine thread stopped on an error" in log
    assert "terminate called" not in log
