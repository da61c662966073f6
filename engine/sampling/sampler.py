"""The fused sampling step: logits [rows, vocab] to next tokens, one row of parameters each.

It runs inside the same jit as the forward pass. Every request value is a per-row array
and every choice a jnp.where or a lax.cond on "does any row use this", so a batch that
uses nothing beyond temperature costs about what greedy does. The order of operations:

    raw logits -> penalties -> logit bias -> allowed-token mask (bans, constraints, forcing)
      -> greedy pick (temperature 0)  |  / temperature -> top-k, top-p, min-p, typical, XTC
      -> Mirostat (rows that use it) -> one inverse-CDF draw per row
      -> logprobs of the pick under the model and under the processed distribution

Rows whose top-k, top-p or min-p cut keeps only tokens among their best 256 run the
stages after the cut on those 256 (engine/candidates.py); the others on the whole row.

Randomness comes from (seed, position) alone, so a seeded request draws the same tokens
whatever else is in its batch, and the n choices of one request differ by their seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from engine.sampling.candidates import Draw, narrow_draw
from engine.sampling.logits_processing import apply_allowed, apply_logit_bias, apply_penalties, count_tokens
from engine.sampling.logprobs import TokenLogprobs, model_logprobs, sampling_logprob_of
from engine.sampling.mirostat import mirostat_step
from engine.sampling.truncation import apply_truncation

MAX_LOGIT_BIAS = 300  # entries of logit_bias per request, as OpenAI allows
NUM_TOP_LOGPROBS = 20  # alternatives computed per sampled token when any row asks


@jax.tree_util.register_dataclass
@dataclass
class SamplingArrays:
    """One row per sequence of the batch; built on the host by engine/sampling_inputs.py."""

    temperature: jax.Array  # [rows] f32, 0 = greedy
    top_k: jax.Array  # [rows] i32, 0 = off
    top_p: jax.Array  # [rows] f32, 1 = off
    min_p: jax.Array  # [rows] f32, 0 = off
    typical_p: jax.Array  # [rows] f32, 1 = off
    xtc_threshold: jax.Array  # [rows] f32
    xtc_probability: jax.Array  # [rows] f32, 0 = off
    frequency_penalty: jax.Array  # [rows] f32
    presence_penalty: jax.Array  # [rows] f32
    repetition_penalty: jax.Array  # [rows] f32, 1 = off
    bias_ids: jax.Array  # [rows, MAX_LOGIT_BIAS] i32, -1 = padding
    bias_values: jax.Array  # [rows, MAX_LOGIT_BIAS] f32
    allowed_words: jax.Array  # [rows, ceil(vocab / 32)] i32 packed bits, -1 = all allowed
    history_ids: jax.Array  # [rows, history] i32 prompt then output ids, -1 = padding
    num_prompt_tokens: jax.Array  # [rows] i32, where the outputs start in history_ids
    mirostat_target: jax.Array  # [rows] f32 (bits), 0 = off
    mirostat_lr: jax.Array  # [rows] f32
    mirostat_mu: jax.Array  # [rows] f32, the state carried from the previous step
    seeds: jax.Array  # [rows] u32
    positions: jax.Array  # [rows] i32, position of the token being sampled
    want_logprobs: jax.Array  # [rows] bool


@jax.tree_util.register_dataclass
@dataclass
class SampleResult:
    tokens: jax.Array  # [rows] i32
    logprobs: TokenLogprobs
    mirostat_mu: jax.Array  # [rows] f32, the state for the next step


def empty_sampling_arrays(num_rows: int, vocab_size: int, history: int) -> SamplingArrays:
    """Neutral host arrays: greedy, nothing shaped, penalised, biased or banned."""
    def full(value, dtype, *shape):
        return np.full((num_rows, *shape), value, dtype)

    return SamplingArrays(
        temperature=full(0, np.float32), top_k=full(0, np.int32), top_p=full(1, np.float32),
        min_p=full(0, np.float32), typical_p=full(1, np.float32), xtc_threshold=full(0.1, np.float32),
        xtc_probability=full(0, np.float32), frequency_penalty=full(0, np.float32),
        presence_penalty=full(0, np.float32), repetition_penalty=full(1, np.float32),
        bias_ids=full(-1, np.int32, MAX_LOGIT_BIAS), bias_values=full(0, np.float32, MAX_LOGIT_BIAS),
        allowed_words=full(-1, np.int32, -(-vocab_size // 32)), history_ids=full(-1, np.int32, history),
        num_prompt_tokens=full(0, np.int32), mirostat_target=full(0, np.float32),
        mirostat_lr=full(0, np.float32), mirostat_mu=full(0, np.float32),
        seeds=full(0, np.uint32), positions=full(0, np.int32), want_logprobs=full(False, np.bool_),
    )


def row_uniforms(seeds, positions, num: int):
    """`num` uniform draws per row [rows, num], a function of that row's seed and position only."""
    def draws(seed, position):
        return jax.random.uniform(jax.random.fold_in(jax.random.key(seed), position), (num,), jnp.float32)

    return jax.vmap(draws)(seeds, positions)


def penalised(logits, arrays: SamplingArrays):
    """Logits after penalties, logit bias and the allowed-token mask."""
    vocab = logits.shape[-1]

    def with_penalties(logits):
        history = arrays.history_ids
        is_output = jnp.arange(history.shape[1])[None, :] >= arrays.num_prompt_tokens[:, None]
        output_counts = count_tokens(jnp.where(is_output, history, -1), vocab)
        present = count_tokens(history, vocab) > 0
        return apply_penalties(logits, output_counts, present, arrays.frequency_penalty,
                               arrays.presence_penalty, arrays.repetition_penalty)

    uses_penalties = jnp.any((arrays.frequency_penalty != 0) | (arrays.presence_penalty != 0)
                             | (arrays.repetition_penalty != 1))
    logits = jax.lax.cond(uses_penalties, with_penalties, lambda x: x, logits)
    # Skipped when no row has a bias: the scatter would copy the whole logits array.
    logits = jax.lax.cond(jnp.any(arrays.bias_ids >= 0),
                          lambda x: apply_logit_bias(x, arrays.bias_ids, arrays.bias_values), lambda x: x, logits)
    return apply_allowed(logits, arrays.allowed_words)


CDF_BLOCK = 256  # tokens per block of the two-level inverse-CDF search


def inverse_cdf_draw(logits, uniform):
    """One token per row from softmax(logits), at a uniform draw per row.

    Two levels instead of one cumulative sum over the vocabulary (slow on XLA's CPU
    backend): find the block of CDF_BLOCK tokens whose mass holds the draw, then the token
    within it. Zero-probability tokens are never picked."""
    rows, vocab = logits.shape
    probs = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))  # unnormalized: the draw scales
    num_blocks = -(-vocab // CDF_BLOCK)
    blocks = jnp.pad(probs, ((0, 0), (0, num_blocks * CDF_BLOCK - vocab))).reshape(rows, num_blocks, CDF_BLOCK)
    block_cdf = jnp.cumsum(blocks.sum(-1), axis=-1)  # [rows, blocks]
    target = uniform * block_cdf[:, -1]
    block = jnp.minimum(jnp.sum(block_cdf < target[:, None], axis=-1), num_blocks - 1)
    mass_before = jnp.where(block > 0, jnp.take_along_axis(block_cdf, jnp.maximum(block - 1, 0)[:, None], 1)[:, 0], 0.0)
    inner = jnp.take_along_axis(blocks, block[:, None, None], axis=1)[:, 0]  # [rows, CDF_BLOCK]
    within = jnp.sum(mass_before[:, None] + jnp.cumsum(inner, axis=-1) < target[:, None], axis=-1)
    # Rounding can carry the draw past the block's last token with probability: stop there.
    last_nonzero = CDF_BLOCK - 1 - jnp.argmax((inner > 0)[:, ::-1], axis=-1)
    token = block * CDF_BLOCK + jnp.minimum(within, last_nonzero)
    return jnp.minimum(token, vocab - 1).astype(jnp.int32)


def full_draw(scaled, arrays: SamplingArrays, uniforms, want_logprob: bool | jax.Array) -> Draw:
    """The full-vocabulary path for temperature-scaled logits [rows, vocab]: every filter,
    Mirostat and the draw over the whole row (the sampling logprob only if `want_logprob`)."""
    shaped = apply_truncation(scaled, arrays.top_k, arrays.top_p, arrays.min_p, arrays.typical_p,
                              arrays.xtc_threshold, arrays.xtc_probability, uniforms[:, 1])
    miro_tokens, mu, shaped = mirostat_step(shaped, arrays.mirostat_target, arrays.mirostat_lr,
                                            arrays.mirostat_mu, uniforms[:, 0])
    drawn = inverse_cdf_draw(shaped, uniforms[:, 0])
    tokens = jnp.where(arrays.mirostat_target > 0, miro_tokens, drawn)
    sampling_logprob = jax.lax.cond(want_logprob, lambda: sampling_logprob_of(shaped, tokens),
                                    lambda: jnp.zeros(tokens.shape, jnp.float32))
    return Draw(tokens=tokens, mirostat_mu=mu, sampling_logprob=sampling_logprob)


def stochastic_draw(processed, arrays: SamplingArrays) -> Draw:
    """Tokens of the temperature rows: the narrow path where a row's cut allows it (see
    engine/candidates.py), the full-vocabulary path for the others, each run only when
    some row needs it."""
    stochastic = arrays.temperature > 0
    uniforms = row_uniforms(arrays.seeds, arrays.positions, 2)  # [draw, XTC coin]
    scaled = processed / jnp.where(stochastic, arrays.temperature, 1.0)[:, None]
    cuts = stochastic & ((arrays.top_k > 0) | (arrays.top_p < 1) | (arrays.min_p > 0))
    narrow, narrowed = jax.lax.cond(
        jnp.any(cuts), lambda: narrow_draw(scaled, arrays, uniforms, inverse_cdf_draw),
        lambda: (_no_draw(arrays), jnp.zeros_like(cuts)))
    narrowed = narrowed & cuts
    want_logprob = jnp.any(arrays.want_logprobs & stochastic & ~narrowed)
    full = jax.lax.cond(jnp.any(stochastic & ~narrowed),
                        lambda: full_draw(scaled, arrays, uniforms, want_logprob), lambda: narrow)
    return jax.tree.map(lambda a, b: jnp.where(narrowed, a, b), narrow, full)


def _no_draw(arrays: SamplingArrays) -> Draw:
    zeros = jnp.zeros(arrays.temperature.shape, jnp.float32)
    return Draw(tokens=zeros.astype(jnp.int32), mirostat_mu=arrays.mirostat_mu, sampling_logprob=zeros)


def sample(logits, arrays: SamplingArrays) -> SampleResult:
    """Next tokens for float32 logits [rows, vocab], with their logprobs and Mirostat state."""
    processed = penalised(logits, arrays)
    greedy = jnp.argmax(processed, axis=-1).astype(jnp.int32)
    stochastic = arrays.temperature > 0
    draw = jax.lax.cond(jnp.any(stochastic), lambda: stochastic_draw(processed, arrays),
                        lambda: _no_draw(arrays))
    tokens = jnp.where(stochastic, draw.tokens, greedy)
    mu = jnp.where(stochastic, draw.mirostat_mu, arrays.mirostat_mu)

    def logprobs():
        # A greedy row's token was picked from `processed` itself.
        greedy_logprob = jax.lax.cond(
            jnp.any(arrays.want_logprobs & ~stochastic), lambda: sampling_logprob_of(processed, tokens),
            lambda: draw.sampling_logprob)
        sampling_logprob = jnp.where(stochastic, draw.sampling_logprob, greedy_logprob)
        return model_logprobs(logits, tokens, sampling_logprob, num_top)

    num_top = min(NUM_TOP_LOGPROBS, logits.shape[-1])
    logprobs = jax.lax.cond(jnp.any(arrays.want_logprobs), logprobs,
                            lambda: empty_logprobs(tokens.shape[0], num_top))
    return SampleResult(tokens=tokens, logprobs=logprobs, mirostat_mu=mu)


def empty_logprobs(num_rows: int, num_top: int) -> TokenLogprobs:
    """What a batch in which no row asked for logprobs returns instead of computing them."""
    zeros = jnp.zeros(num_rows, jnp.float32)
    return TokenLogprobs(
        logprob=zeros, sampling_logprob=zeros, rank=jnp.zeros(num_rows, jnp.int32),
        top_ids=jnp.zeros((num_rows, num_top), jnp.int32),
        top_logprobs=jnp.zeros((num_rows, num_top), jnp.float32),
    )
