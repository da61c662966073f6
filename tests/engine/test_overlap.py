"""The host out of the device's way (engine/engine.py `step`, `overlap_steps`): the next window
of decode steps is dispatched before the last one's tokens are read back, fed on the device
by its sampled tokens, so the device computes it while the host lands the last one.

Made measurable on a CPU: each decode step of the compiled program is given device work of
its own (a loop of small matmuls, so a window takes a tenth of a second or more), and the
host's landing of a window a sleep as long as its device time, measured first. A window then takes
about max(host, device) with the overlap, and their sum without it. (A host callback that
sleeps would not do: JAX runs a CPU program holding one synchronously, dispatch included.)
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from engine.config import EngineConfig
from engine.host.request import Request, SamplingParams, StopCriteria
from engine.models import llama

WINDOW_STEPS = 4
OVERLAPPED = EngineConfig(max_model_len=256, max_num_seqs=4, max_num_batched_tokens=64, page_size=4, num_pages=200,
                          max_decode_steps=WINDOW_STEPS, num_speculative_tokens=0)
BUSY_LOOPS = 60  # 256 x 256 matmuls a decode step: 0.1 s a window on the 2-core dev machine


def busy_logits(logits):
    """The model's logits after device work they depend on: a slow device step."""
    def busy(self, hidden, live=None):
        out = logits(self, hidden, live)
        weight = jnp.full((256, 256), 1.0 / 256, jnp.float32)
        work = jax.lax.fori_loop(0, BUSY_LOOPS, lambda _, acc: jnp.tanh(acc @ weight), weight + hidden.sum())
        return out + 0.0 * work[0, 0]  # not folded away: 0 * x is not 0 for every float x

    return busy


def window_times(engine, host_seconds: float) -> list[float]:
    """Seconds between the outputs of successive windows of one long greedy request, past
    its prompt and first windows, with `host_seconds` of sleep as each window lands."""
    engine.add_request(Request(f"long-{host_seconds}", [5, 6, 7, 8], SamplingParams(temperature=0.0),
                               StopCriteria(max_tokens=1 + 8 * WINDOW_STEPS, ignore_eos=True)))
    land = engine._land

    def slow_land(flight):
        outputs = land(flight)  # its results back (the device done with it), then the host's time
        time.sleep(host_seconds)
        return outputs

    engine._land = slow_land
    stamps = []
    while engine.has_unfinished():
        engine.step()
        stamps.append(time.perf_counter())
    del engine._land  # the method again
    return list(np.diff(stamps)[2:-1])


def test_a_window_takes_the_longer_of_host_and_device_not_their_sum(tiny_engine_factory, monkeypatch):
    monkeypatch.setattr(llama.Llama, "logits", busy_logits(llama.Llama.logits))
    engine = tiny_engine_factory(OVERLAPPED)

    def windows(overlap: bool, host_seconds: float) -> float:
        engine.config = dataclasses.replace(OVERLAPPED, overlap_steps=overlap)
        return float(np.median(window_times(engine, host_seconds)))

    device = windows(False, 0.0)  # a window's device time, and a little host
    assert device > 0.05  # the busy work is there
    with_overlap, without = windows(True, device), windows(False, device)
    print(f"device {device:.3f} s a window; with the overlap {with_overlap:.3f}, without {without:.3f}")
    # max(host, device) = device, and their sum twice that.
    assert with_overlap < 1.4 * device, (with_overlap, device)
    assert without > 1.8 * device, (without, device)
