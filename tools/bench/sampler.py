"""Sampler benchmark for tools/bench.py: the full sampling step against greedy, and against
a SmolLM2 decode step of as many rows measured in the same run."""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from engine.sampling import empty_sampling_arrays, sample
from engine.sampling.masks import pack_banned
from tools.bench.roofline import best_seconds


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


def decode_step_seconds(rows: int, context: int, repeats: int) -> float:
    """The fastest decode step of the embedded SmolLM2's runner for `rows` sequences of
    `context` cached tokens each (greedy): what the sampler's share is measured against.
    The rows are planned directly, so every timed step has exactly `rows` rows at that
    context (through the scheduler, early sequences decode or finish while later ones
    prefill); the cache's contents don't change the step's cost."""
    from engine.config import EngineConfig
    from engine.device.runner import RowPlan
    from engine.engine import Engine
    from engine.host.request import SamplingParams
    from engine.sampling import RowSampling

    pages_per_seq = -(-(context + 16) // 16)
    config = EngineConfig(max_model_len=16 * pages_per_seq, max_num_seqs=rows, max_num_batched_tokens=rows,
                          num_pages=rows * pages_per_seq + 2, enable_prefix_caching=False)
    engine = Engine.from_model(None, config)
    history = list(range(100, 100 + context + 1))
    greedy = RowSampling(SamplingParams(temperature=0.0), seed=0, token_ids=history,
                         num_prompt_tokens=context, end_token_ids=frozenset())
    plans = [RowPlan([history[-1]], context, list(range(1 + i * pages_per_seq, 1 + (i + 1) * pages_per_seq)),
                     greedy) for i in range(rows)]
    return best_seconds(lambda: engine.runner.execute(plans), repeats)


def run_sampler_benchmark(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    rows, vocab = args.rows, args.vocab
    logits = jnp.asarray(rng.standard_normal((rows, vocab), dtype=np.float32) * 3)
    step = jax.jit(sample)
    greedy = jax.device_put(empty_sampling_arrays(rows, vocab, args.history))
    temperature = empty_sampling_arrays(rows, vocab, args.history)
    temperature.temperature[:] = 0.8
    full = jax.device_put(full_sampler_arrays(rows, vocab, args.history, rng))
    decode = decode_step_seconds(rows, args.decode_context, args.repeats) if args.decode_step else None
    print(f"sampler at {rows} rows, vocab {vocab}, history {args.history}:")
    for name, arrays in (("greedy", greedy), ("temperature only", jax.device_put(temperature)), ("every feature", full)):
        seconds = best_seconds(lambda: step(logits, arrays).tokens.block_until_ready(), args.repeats)
        share = f" ({100 * seconds / decode:.1f}% of a decode step)" if decode else ""
        print(f"  {name}: {1000 * seconds:.1f} ms{share}")
    if decode:
        print(f"  SmolLM2 decode step at {rows} rows of context {args.decode_context} (greedy): "
              f"{1000 * decode:.1f} ms")
