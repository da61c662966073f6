"""Host-side bans and packed allowed-token masks against brute-force definitions."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engine.sampling.masks import (bad_word_bans, force_token, no_repeat_ngram_bans, pack_allowed, pack_banned,
                                   stop_bans)
from engine.sampling.processors import apply_allowed, unpack_allowed


def test_bad_words_single_token_is_always_banned():
    assert bad_word_bans([], [[7]]) == {7}
    assert bad_word_bans([1, 2, 3], [[7], [9]]) == {7, 9}
    assert bad_word_bans([1, 2], [[]]) == set()


def test_bad_words_three_tokens_ban_the_last_only_after_the_first_two():
    phrase = [[4, 5, 6]]
    assert bad_word_bans([1, 4, 5], phrase) == {6}
    assert bad_word_bans([4, 5], phrase) == {6}
    assert bad_word_bans([4, 5, 1], phrase) == set()
    assert bad_word_bans([5], phrase) == set()  # too short: must not wrap around the slice
    assert bad_word_bans([], phrase) == set()
    assert bad_word_bans([4, 5], [[4, 5, 6], [5, 8], [9, 5, 7]]) == {6, 8}


def brute_force_ngram_bans(tokens, n):
    """Every token t such that tokens + [t] ends with an n-gram already in tokens."""
    ngrams = {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}
    return {t for t in set(tokens) if len(tokens) + 1 >= n and tuple((tokens + [t])[-n:]) in ngrams}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngram_matches_brute_force(n):
    rng = random.Random(n)
    for length in range(0, 40):
        tokens = [rng.randrange(5) for _ in range(length)]
        assert no_repeat_ngram_bans(tokens, n) == brute_force_ngram_bans(tokens, n), tokens


def test_no_repeat_ngram_hand_worked_and_off():
    # bigrams of [1, 2, 3, 1]: (1,2) (2,3) (3,1); the last token 1 was followed by 2 before.
    assert no_repeat_ngram_bans([1, 2, 3, 1], 2) == {2}
    # trigram prefix (3, 1) never occurred before, so nothing is banned.
    assert no_repeat_ngram_bans([1, 2, 3, 1], 3) == set()
    assert no_repeat_ngram_bans([1, 2, 3, 1, 2], 3) == {3}
    assert no_repeat_ngram_bans([1, 2, 1, 2], 0) == set()
    assert no_repeat_ngram_bans([1], 3) == set()


def test_no_repeat_ngram_handles_thousands_of_tokens():
    rng = random.Random(0)
    tokens = [rng.randrange(50) for _ in range(8000)]
    assert no_repeat_ngram_bans(tokens, 2) == brute_force_ngram_bans(tokens, 2)


def test_stop_bans_until_min_tokens_and_min_total_tokens():
    stops = [0, 2]
    assert stop_bans(0, 3, 10, 0, stops) == {0, 2}
    assert stop_bans(2, 3, 12, 0, stops) == {0, 2}
    assert stop_bans(3, 3, 13, 0, stops) == set()
    assert stop_bans(5, 0, 14, 15, stops) == {0, 2}
    assert stop_bans(5, 0, 15, 15, stops) == set()
    assert stop_bans(5, 0, 15, None, stops) == set()


@pytest.mark.parametrize("vocab", [300, 320, 33, 1])
def test_pack_allowed_round_trips_through_unpack(vocab):
    rng = random.Random(vocab)
    allowed = {rng.randrange(vocab) for _ in range(vocab // 3 + 1)} | {vocab - 1}
    allowed |= {t for t in (31, 63, 95) if t < vocab}  # bit 31: negative int32 words
    words = pack_allowed(allowed, vocab)
    assert len(words) == -(-vocab // 32)
    assert all(-2**31 <= word < 2**31 for word in words)
    assert vocab < 32 or any(word < 0 for word in words)
    unpacked = np.asarray(unpack_allowed(np.array([words], np.int32), vocab))[0]
    assert set(np.flatnonzero(unpacked).tolist()) == allowed
    everything = np.asarray(unpack_allowed(np.array([pack_allowed(None, vocab)], np.int32), vocab))
    assert everything.all()


def test_pack_allowed_rejects_ids_outside_the_vocabulary():
    with pytest.raises(ValueError):
        pack_allowed([300], 300)
    with pytest.raises(ValueError):
        pack_allowed([-1], 300)


def test_force_token_makes_argmax_pick_it():
    vocab = 300
    logits = np.random.default_rng(1).standard_normal((3, vocab)).astype(np.float32)
    forced = [0, 31, 299]
    words = np.array([force_token(token, vocab) for token in forced], np.int32)
    out = np.asarray(apply_allowed(logits, words))
    assert np.array_equal(out.argmax(-1), forced)
    assert np.isfinite(out).sum() == 3


@pytest.mark.parametrize("vocab", [300, 320, 33])
def test_pack_banned_round_trips_through_unpack(vocab):
    banned = {0, 31, 32, vocab - 1, 10**6}  # an id past the vocabulary is ignored
    allowed = np.asarray(unpack_allowed(np.array([pack_banned(banned, vocab)], np.int32), vocab))[0]
    assert set(np.flatnonzero(~allowed)) == {t for t in banned if t < vocab}
