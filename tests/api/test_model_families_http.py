"""Every family beyond the plain Llama serves through HTTP with the openai SDK: a tiny random
Gemma 3, Gemma 2, windowed Mistral and Qwen3-MoE, each written as a Hugging Face checkpoint and loaded
by `flint serve`'s own loader, answer greedy completions with the tokens an independent
NumPy forward predicts, and stream chat."""

from __future__ import annotations

import dataclasses

import numpy as np
import openai
import pytest
from api_helpers import ONE_BUCKET_ENGINE, wait_until_serving
from family_configs import FAMILIES, MOE
from gemma_reference import greedy as gemma_greedy
from moe_reference import greedy as moe_greedy
from litestar.testing import TestClient
from loader_files import write_hf
from numpy_reference import greedy as llama_greedy

from api.server.app import create_app
from api.server.settings import Settings
from engine.engine import Engine
from engine.loader.checkpoint import load_checkpoint
from engine.models.params import random_params

GREEDY = {"gemma2": gemma_greedy, "gemma3": gemma_greedy, "mistral": llama_greedy, "qwen3_moe": moe_greedy}
CONFIGS = {**FAMILIES, **MOE}


@pytest.fixture(scope="module", params=["gemma3", "gemma2", "mistral", "qwen3_moe"])
def served(request, tmp_path_factory, smollm2_tokenizer):
    """(family, config, weights, SDK client, model id) of an app serving that family."""
    name = request.param
    config = CONFIGS[name].replace(vocab_size=smollm2_tokenizer.vocab_size,
                                   final_logit_softcapping=CONFIGS[name].final_logit_softcapping and 30.0)
    params = random_params(config, seed=4)
    checkpoint = load_checkpoint(str(write_hf(tmp_path_factory.mktemp(name) / f"tiny-{name}", config, params, name)))

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(checkpoint, smollm2_tokenizer, settings.engine)
        engine.runner.warmup()
        return engine

    # XLA's optimizations off: the app's one bucket compiles in about half the time, and these
    # tests generate a few tokens.
    settings = Settings(engine=dataclasses.replace(ONE_BUCKET_ENGINE, optimize_compiled_code=False))
    with TestClient(app=create_app(settings, engine_factory=engine_factory)) as client:
        wait_until_serving(client, timeout=600)
        sdk = openai.OpenAI(base_url=f"{client.base_url}/v1", api_key="unused", http_client=client, max_retries=0)
        yield name, config, params, sdk, sdk.models.list().data[0].id


def test_greedy_completions_are_the_reference_s_tokens(served, smollm2_tokenizer):
    name, config, params, sdk, model = served
    prompt = [int(t) for t in np.random.default_rng(2).integers(0, config.vocab_size, 21)]  # longer than the windows
    completion = sdk.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0,
                                        extra_body={"ignore_eos": True})
    expected = GREEDY[name](config, params, prompt, 8)
    assert completion.choices[0].text == smollm2_tokenizer.decode(expected)
    assert completion.usage.completion_tokens == 8


def test_chat_streams(served):
    _, _, _, sdk, model = served
    stream = sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello there"}],
                                         max_tokens=6, temperature=0, stream=True,
                                         stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].usage.completion_tokens == 6
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
