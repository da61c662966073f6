"""engine/async_encoder.py: the inputs of requests that arrive while a batch runs are run
together as the next batch, each caller gets its own inputs' results, and a stop ends every wait."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from engine.async_encoder import AsyncEncoder
from engine.device.encoder_runner import EncoderInput, InputTooLong
from engine.loader.sentence_transformers import load_encoder
from tests.engine.bert_reference import WORDS, bert_states, pooled, write_sentence_transformer


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("embedder")
    config, tensors = write_sentence_transformer(folder, "mean", True)
    encoder = AsyncEncoder.started(load_encoder(folder))
    yield encoder, config, tensors
    encoder.stop()


def test_requests_waiting_behind_a_batch_run_together_and_each_gets_its_own(served, monkeypatch):
    encoder, config, tensors = served
    run, release, sizes = encoder.runner.run, threading.Event(), []

    def held_run(inputs):  # the first batch waits until every request has queued
        sizes.append(len(inputs))
        release.wait(10)
        return run(inputs)

    monkeypatch.setattr(encoder.runner, "run", held_run)
    rng = np.random.default_rng(1)
    requests = [[EncoderInput(encoder.checkpoint.tokenizer.encode(" ".join(rng.choice(WORDS, size=3 + index))))
                 for _ in range(1 + index % 3)] for index in range(8)]

    async def all_of_them():
        first = asyncio.create_task(encoder.run(requests[0]))
        while not sizes:  # the first request runs alone, held
            await asyncio.sleep(0.01)
        rest = [asyncio.create_task(encoder.run(inputs)) for inputs in requests[1:]]
        while len(encoder._queue) < len(rest):
            await asyncio.sleep(0.01)
        release.set()
        return await asyncio.gather(first, *rest)

    before = encoder.num_batches
    results = asyncio.run(all_of_them())
    assert encoder.num_batches - before == 2 and sizes == [len(requests[0]), sum(map(len, requests[1:]))]
    for inputs, vectors in zip(requests, results):
        want = np.stack([pooled(bert_states(tensors, config, item.ids), "mean", True) for item in inputs])
        np.testing.assert_allclose(vectors, want, rtol=2e-5, atol=2e-5)


def test_a_long_input_is_refused_before_it_queues(served):
    encoder, *_ = served
    with pytest.raises(InputTooLong, match="input 1 has 49 tokens"):
        asyncio.run(encoder.run([EncoderInput([2, 3]), EncoderInput([2] * 49)]))


def test_a_stopped_encoder_refuses_work(tmp_path):
    write_sentence_transformer(tmp_path, "cls", False)
    encoder = AsyncEncoder.started(load_encoder(tmp_path))
    encoder.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        asyncio.run(encoder.run([EncoderInput([2, 3])]))
