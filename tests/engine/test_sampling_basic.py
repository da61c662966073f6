"""The greedy and temperature sampling step against its definition."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from engine.sampling import empty_sampling_arrays, sample
from engine.sampling.draw import row_uniforms

LOGITS = np.array([2.0, 1.0, 0.0, -1.0, 3.0], dtype=np.float32)


def batch_for(num_rows, temperature, seeds, positions, vocab=len(LOGITS)):
    arrays = empty_sampling_arrays(num_rows, vocab, history=4)
    arrays.temperature[:] = temperature
    arrays.seeds[:] = seeds
    arrays.positions[:] = positions
    return arrays


def draw(logits, arrays):
    return np.asarray(jax.jit(sample)(jnp.asarray(logits), arrays).tokens)


def test_temperature_zero_is_argmax():
    logits = np.random.default_rng(0).standard_normal((8, 50)).astype(np.float32)
    batch = batch_for(8, 0.0, np.arange(8), np.arange(8), vocab=50)
    assert np.array_equal(draw(logits, batch), logits.argmax(-1))


def test_temperature_sampling_follows_the_softmax():
    num_draws, temperature = 20000, 0.7
    logits = np.tile(LOGITS, (num_draws, 1))
    rng = np.random.default_rng(1)
    batch = batch_for(num_draws, temperature, rng.integers(0, 2**31, num_draws), rng.integers(0, 4096, num_draws))
    tokens = draw(logits, batch)
    expected = np.exp(LOGITS / temperature) / np.exp(LOGITS / temperature).sum()
    observed = np.bincount(tokens, minlength=len(LOGITS)) / num_draws
    # Five standard errors of a binomial proportion: fails by chance about once in a million.
    assert np.all(np.abs(observed - expected) < 5 * np.sqrt(expected * (1 - expected) / num_draws))


def test_a_row_draws_the_same_token_whatever_shares_its_batch():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((16, 300)).astype(np.float32)
    batch = batch_for(16, 1.0, rng.integers(0, 2**31, 16), rng.integers(0, 500, 16), vocab=300)
    together = draw(logits, batch)
    for row in (0, 7, 15):
        alone = batch_for(1, 1.0, batch.seeds[row], batch.positions[row], vocab=300)
        assert draw(logits[row:row + 1], alone)[0] == together[row]


def test_greedy_and_sampled_rows_mix():
    logits = np.tile(LOGITS, (4, 1))
    batch = batch_for(4, [0.0, 5.0, 0.0, 5.0], [1, 2, 3, 4], [0, 0, 0, 0])
    tokens = draw(logits, batch)
    assert tokens[0] == tokens[2] == 4


def test_result_shape_is_what_sample_returns_for_any_rows_from_one_trace(monkeypatch):
    # The runner's rounds carry sample's result from before the first sample: its shapes
    # come from one single-row trace, stretched to each bucket's rows.
    from engine.sampling import sampler

    monkeypatch.setattr(sampler, "_ONE_ROW_RESULTS", {})
    traces = []
    real_sample = sampler.sample
    monkeypatch.setattr(sampler, "sample", lambda *args: traces.append(1) or real_sample(*args))
    for rows in (1, 4, 32):
        arrays = empty_sampling_arrays(rows, 300, 16)
        expected = jax.eval_shape(lambda: real_sample(jnp.zeros((rows, 300)), arrays))
        shaped = sampler.result_shape(arrays, 300)
        assert jax.tree_util.tree_structure(shaped) == jax.tree_util.tree_structure(expected)
        assert [(a.shape, a.dtype) for a in jax.tree_util.tree_leaves(shaped)] == \
            [(a.shape, a.dtype) for a in jax.tree_util.tree_leaves(expected)]
    assert len(traces) == 1


def test_one_seed_over_consecutive_positions_follows_the_softmax():
    """A seeded request draws with one seed at positions 0, 1, 2, ...: those draws must be
    as independent as different seeds' (the counter hash, engine/sampling/draw.py)."""
    num_draws, temperature = 20000, 0.7
    batch = batch_for(num_draws, temperature, 12345, np.arange(num_draws))
    tokens = draw(np.tile(LOGITS, (num_draws, 1)), batch)
    expected = np.exp(LOGITS / temperature) / np.exp(LOGITS / temperature).sum()
    observed = np.bincount(tokens, minlength=len(LOGITS)) / num_draws
    assert np.all(np.abs(observed - expected) < 5 * np.sqrt(expected * (1 - expected) / num_draws))


def test_row_uniforms_are_uniform_and_uncorrelated():
    """Uniform in (0, 1), and no correlation between a row's draws, its neighbouring
    positions, neighbouring seeds or its two streams (the beams' noise and the draw)."""
    n = 50000
    positions = np.arange(n)
    uniforms = np.asarray(row_uniforms(jnp.full(n, 7, jnp.uint32), jnp.asarray(positions), 2))
    other_stream = np.asarray(row_uniforms(jnp.full(n, 7, jnp.uint32), jnp.asarray(positions), 2, stream=1))
    next_seed = np.asarray(row_uniforms(jnp.full(n, 8, jnp.uint32), jnp.asarray(positions), 2))
    assert 0 < uniforms.min() and uniforms.max() < 1
    counts = np.histogram(uniforms[:, 0], bins=20, range=(0, 1))[0]
    assert np.all(np.abs(counts - n / 20) < 5 * np.sqrt(n / 20 * (1 - 1 / 20)))
    first = uniforms[:, 0]
    # A correlation's standard error is about 1 / sqrt(n): five of them.
    for other in (uniforms[:, 1], np.roll(first, 1), other_stream[:, 0], next_seed[:, 0]):
        assert abs(np.corrcoef(first, other)[0, 1]) < 5 / np.sqrt(n)
