"""Sampler benchmark for tools/bench.py: the full sampling step against greedy."""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from bench import best_seconds
from engine.sampling import empty_sampling_arrays, sample
from engine.sampling_host import pack_banned


def full_sampler_arrays(rows: int, vocab: int, history: int, rng):
    """Every feature on in every row: the worst case a batch can ask for."""
    arrays = empty_sampling_arrays(rows, vocab, history)
    arrays.temperature[:] = 0.8
    arrays.top_k[:] = 50
    arrays.top_p[:] = 0.9
    arrays.min_p[:] = 0.02
    arrays.typical_p[:] = 0.95
    arrays.xtc_probability[:] = 0.5
    arrays.frequency_penalty[:] = 0.3
    arrays.presence_penalty[:] = 0.2
    arrays.repetition_penalty[:] = 1.1
    arrays.history_ids[:, :256] = rng.integers(0, vocab, (rows, 256))
    arrays.num_prompt_tokens[:] = 128
    arrays.bias_ids[:, :8] = rng.integers(0, vocab, (rows, 8))
    arrays.bias_values[:, :8] = 5.0
    arrays.allowed_words[:] = pack_banned(range(0, 2000, 7), vocab)
    arrays.seeds[:] = rng.integers(0, 2**31, rows)
    arrays.positions[:] = 200
    arrays.want_logprobs[:] = True
    return arrays


def run_sampler_benchmark(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    rows, vocab = args.rows, args.vocab
    logits = jnp.asarray(rng.standard_normal((rows, vocab), dtype=np.float32) * 3)
    step = jax.jit(sample)
    greedy = jax.device_put(empty_sampling_arrays(rows, vocab, args.history))
    temperature = empty_sampling_arrays(rows, vocab, args.history)
    temperature.temperature[:] = 0.8
    full = jax.device_put(full_sampler_arrays(rows, vocab, args.history, rng))
    print(f"sampler at {rows} rows, vocab {vocab}, history {args.history}:")
    for name, arrays in (("greedy", greedy), ("temperature only", jax.device_put(temperature)), ("every feature", full)):
        print(f"  {name}: {1000 * best_seconds(lambda: step(logits, arrays).tokens.block_until_ready(), args.repeats):.1f} ms")
