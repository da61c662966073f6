"""The host side of the sampling rows: declarations in, padded and filled arrays out."""

from __future__ import annotations

import numpy as np

from engine.sampling import RowSampling, SamplingParams, declared_rows, empty_sampling_arrays, fill_row
from engine.sampling.masks import pack_allowed
from engine.sampling.params import bounds_of

VOCAB, HISTORY = 100, 8


def inside_bounds(name: str) -> float | int:
    """A value of the parameter other than its default, halfway into its declared range."""
    bounds = bounds_of(SamplingParams, name)
    high = min(bounds.high, VOCAB, bounds.low + 1)
    value = (bounds.low + high) / 2
    return int(value) + 1 if bounds.integer else value


def test_every_declared_row_is_padded_as_declared():
    arrays = empty_sampling_arrays(3, VOCAB, HISTORY)
    assert set(arrays.rows) == set(declared_rows()) and len(arrays.rows) >= 12
    for name, spec in declared_rows().items():
        row = getattr(arrays, name)
        assert row is arrays.rows[name] and row.shape == (3,) and row.dtype == spec.dtype, name
        assert np.all(row == spec.pad), name
    assert arrays.temperature[0] == 0, "padding rows are greedy"


def test_fill_row_copies_every_declared_row_and_nothing_else():
    values = {name: inside_bounds(name) for name in declared_rows()}
    params = SamplingParams(**values)
    defaults = SamplingParams()
    assert all(value != getattr(defaults, name) for name, value in values.items()), "none is its default"
    arrays = empty_sampling_arrays(3, VOCAB, HISTORY)
    fill_row(arrays, 1, RowSampling(params, seed=7, token_ids=[1, 2, 3], num_prompt_tokens=2,
                                    end_token_ids=frozenset()), position=3, vocab_size=VOCAB)
    for name, spec in declared_rows().items():
        assert arrays.rows[name][1] == np.asarray(values[name], spec.dtype), name
        assert arrays.rows[name][0] == arrays.rows[name][2] == spec.pad, name
    assert arrays.seeds[1] == 7 and arrays.positions[1] == 3


def test_fill_row_writes_bias_history_mask_and_state():
    params = SamplingParams(temperature=0.5, logit_bias=((5, 2.0), (9, -1.0)), presence_penalty=0.5,
                            forced_output_tokens=(42,), logprobs=2)
    row = RowSampling(params, seed=3, token_ids=list(range(10, 22)), num_prompt_tokens=12,
                      end_token_ids=frozenset({0}), mirostat_mu=4.5)
    arrays = empty_sampling_arrays(2, VOCAB, HISTORY)
    fill_row(arrays, 0, row, position=12, vocab_size=VOCAB)
    assert list(arrays.bias_ids[0, :3]) == [5, 9, -1] and list(arrays.bias_values[0, :2]) == [2.0, -1.0]
    assert list(arrays.history_ids[0]) == list(range(14, 22)), "the latest HISTORY ids"
    assert arrays.num_prompt_tokens[0] == 8, "outputs start where the prompt ends in the window"
    assert list(arrays.allowed_words[0]) == pack_allowed([42], VOCAB), "the first output is forced"
    assert arrays.want_logprobs[0] and not arrays.want_logprobs[1]
    assert arrays.mirostat_mu[0] == 4.5
    assert np.all(arrays.history_ids[1] == -1) and np.all(arrays.allowed_words[1] == -1)


def test_end_tokens_are_banned_until_min_tokens():
    params = SamplingParams()
    arrays = empty_sampling_arrays(2, VOCAB, HISTORY)
    for index, outputs in enumerate(([7], [7, 8])):
        fill_row(arrays, index, RowSampling(params, seed=0, token_ids=[1, *outputs], num_prompt_tokens=1,
                                            end_token_ids=frozenset({2, 40}), min_tokens=2),
                 position=1 + len(outputs), vocab_size=VOCAB)
    unpacked = (arrays.allowed_words[:, :, None] >> np.arange(32)) & 1
    allowed = unpacked.reshape(2, -1)[:, :VOCAB].astype(bool)
    assert set(np.flatnonzero(~allowed[0])) == {2, 40}
    assert allowed[1].all()
