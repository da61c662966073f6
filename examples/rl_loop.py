"""A policy-gradient loop with Flint generating in the same process (REINFORCE with optax).

Each step: sample completions with `LLM.generate`, reward each (how much of its text is the
letter e), compute the loss with a JAX forward of the same model written here, take an optax
step, and give the new weights to the engine with `llm.update_weights`: the arrays go from
the trainer to the engine on the device, with no file, no socket and no recompile.

It checks three things as it goes, and fails loudly if one breaks:
- after each update, the engine's logprobs of a fixed prompt's greedy continuation equal
  this file's forward of the new weights (so the weights were applied, and no KV the old
  weights computed was read from the prefix cache);
- no program was compiled after the first update (the engine's relayout and step
  programs, and the trainer's, are each compiled once);
- the mean reward rises over the steps (fixed seeds make the run reproducible).

    python examples/rl_loop.py            # a tiny random Llama over SmolLM2's tokenizer
"""

from __future__ import annotations

import argparse
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from engine.config import EngineConfig, ModelConfig
from engine.device.compile_cache import CompileCounter
from engine.engine import Engine
from engine.loader.checkpoint import Checkpoint, load_checkpoint
from engine.loader.serving import tokenizer_for
from engine.loader.source import ModelSource
from engine.models.params import random_params
from flint import LLM, SamplingParams

PROMPT = "Write a sentence with many a letter e in it:"
# Pages of it stay in the prefix cache from one step to the next: the update must reset it.
PROBE = ("The lucky numbers of the week, drawn in the town square on Sunday morning before a crowd of "
         "several hundred people, in the order in which they were drawn, are the following ones:")
SAMPLES, COMPLETION, TOP_K = 32, 6, 20  # completions a step, tokens each, tokens sampled among
TOLERANCE = 2e-4  # nats: the engine's XLA program against this file's forward, both float32


def tiny_policy(vocab_size: int, seed: int) -> tuple[ModelConfig, dict]:
    config = ModelConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=16, max_position_embeddings=256)
    return config, jax.tree.map(jnp.asarray, random_params(config, seed=seed))


def forward(config: ModelConfig, params: dict, tokens: jax.Array) -> jax.Array:
    """Logits [batch, time, vocab] of a Llama (written apart from the engine's)."""
    batch, time = tokens.shape
    heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
    norm = lambda x, w: x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + config.rms_norm_eps) * w  # noqa: E731
    inv_freq = 1.0 / config.rope_theta ** (jnp.arange(0, head_dim, 2) / head_dim)
    angles = jnp.arange(time)[:, None] * inv_freq[None, :]
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]

    def rope(x):  # the two halves of each head rotated against each other
        first, second = x[..., : head_dim // 2], x[..., head_dim // 2:]
        return jnp.concatenate([first * cos - second * sin, second * cos + first * sin], -1)

    causal = jnp.tril(jnp.ones((time, time), bool))
    x = params["embed"][tokens]
    for i in range(config.num_layers):
        layer = {name: value[i] for name, value in params["layers"].items()}
        h = norm(x, layer["attn_norm"])
        q = rope((h @ layer["wq"].T).reshape(batch, time, heads, head_dim))
        k = rope((h @ layer["wk"].T).reshape(batch, time, kv_heads, head_dim))
        v = (h @ layer["wv"].T).reshape(batch, time, kv_heads, head_dim)
        k, v = (jnp.repeat(t, heads // kv_heads, axis=2) for t in (k, v))
        scores = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(head_dim)
        weights = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
        x = x + jnp.einsum("bhts,bshd->bthd", weights, v).reshape(batch, time, -1) @ layer["wo"].T
        h = norm(x, layer["mlp_norm"])
        x = x + (jax.nn.silu(h @ layer["w_gate"].T) * (h @ layer["w_up"].T)) @ layer["w_down"].T
    return norm(x, params["final_norm"]) @ params.get("lm_head", params["embed"]).T


def token_logprobs(config: ModelConfig, params: dict, sequences: jax.Array, prompt_length: int) -> jax.Array:
    """log p(token | everything before it) of each completion token: [batch, completion]."""
    logits = forward(config, params, sequences)[:, prompt_length - 1: -1]
    chosen = sequences[:, prompt_length:]
    return jnp.take_along_axis(jax.nn.log_softmax(logits, -1), chosen[..., None], -1)[..., 0]


def reward(text: str) -> float:
    """A verifiable reward a random tiny model earns some of from the start: the share of
    its text's characters that are the letter e (learning to write "7" would start at 0)."""
    return text.count("e") / max(len(text), 1)


def make_train_step(config: ModelConfig, optimizer, prompt_length: int):
    def loss(params, sequences, advantages):
        return -jnp.mean(advantages * token_logprobs(config, params, sequences, prompt_length).sum(-1))

    @jax.jit
    def train_step(params, state, sequences, advantages):
        grads = jax.grad(loss)(params, sequences, advantages)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    return train_step


def check_probe(llm: LLM, config: ModelConfig, params: dict) -> float:
    """The engine's logprobs of the probe's greedy continuation against this file's forward
    of `params`; returns the largest difference (raises past TOLERANCE)."""
    greedy = SamplingParams(temperature=0, max_tokens=COMPLETION, ignore_eos=True, logprobs=0)
    result = llm.generate([PROBE], greedy, use_tqdm=False)[0]
    out = result.outputs[0]
    engine = np.array([step[token].logprob for token, step in zip(out.token_ids, out.logprobs)])
    sequence = jnp.array([result.prompt_token_ids + out.token_ids])
    reference = np.asarray(token_logprobs(config, params, sequence, len(result.prompt_token_ids))[0])
    assert len(result.prompt_token_ids) > 2 * llm.engine.config.page_size  # its pages are cached
    difference = float(np.max(np.abs(engine - reference)))
    assert difference < TOLERANCE, f"the engine's logprobs are {difference:.2e} nats from the new weights' forward"
    return difference


def run(steps: int = 6, learning_rate: float = 0.05, seed: int = 0) -> list[float]:
    """The loop; returns the mean reward of each step's samples."""
    tokenizer = tokenizer_for(load_checkpoint(None, with_params=False))
    config, params = tiny_policy(tokenizer.vocab_size, seed)
    source = ModelSource(id="tiny-policy", path=None, format="hf", context_length=256)
    # One compiled step shape: the samples' decodes fill it, and prompts go through it in chunks.
    engine_config = EngineConfig(max_model_len=256, max_num_seqs=SAMPLES, max_num_batched_tokens=SAMPLES,
                                 num_pages=64 * SAMPLES // 8, token_buckets=(SAMPLES,))
    engine = Engine(Checkpoint(config, jax.tree.map(np.asarray, params), source), tokenizer, engine_config)
    engine.runner.warmup()
    llm = LLM.from_engine(engine)
    optimizer = optax.adam(learning_rate)
    state = optimizer.init(params)
    prompt_ids = tokenizer.encode(PROMPT)
    train_step = make_train_step(config, optimizer, len(prompt_ids))
    rewards, counter = [], CompileCounter()
    for step in range(steps):
        # Among each position's TOP_K likeliest tokens: a random model spreads its mass over the
        # whole vocabulary, where a few steps would never find the rewarded tokens twice.
        sampling = SamplingParams(n=SAMPLES, temperature=1.0, top_k=TOP_K, seed=seed * 1000 + step,
                                  max_tokens=COMPLETION, ignore_eos=True)
        outputs = llm.generate([prompt_ids], sampling, use_tqdm=False)[0].outputs
        scores = np.array([reward(out.text) for out in outputs])
        rewards.append(float(scores.mean()))
        sequences = jnp.array([prompt_ids + out.token_ids for out in outputs])
        advantages = jnp.asarray((scores - scores.mean()) / (scores.std() + 1e-6))
        params, state = train_step(params, state, sequences, advantages)
        llm.update_weights(params)
        difference = check_probe(llm, config, params)
        if step == 0:
            counter.start()  # from here on, nothing new may compile
        print(f"step {step}: mean reward {rewards[-1]:.3f}, probe logprobs within {difference:.1e} nats")
    counter.stop()
    assert counter.compiled + counter.loaded == 0, f"compiled after the first update: {counter.describe()}"
    assert rewards[-1] > 1.5 * rewards[0], f"the reward did not rise: {rewards}"
    return rewards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run(args.steps, args.learning_rate, args.seed)


if __name__ == "__main__":
    main()
