"""Host side of the allowed-token mask: token bans and packed masks, worked out per row.

Bad words, repeated n-grams, EOS before the length floors and forced tokens depend only on
token ids the host already holds, so they are worked out here in plain Python each step
and become bits cleared in the row's packed allowed-token mask, the same hook structured
outputs use, so the device sees one mask (engine/sampling/processors.py applies it).
Masks are packed as llguidance packs them: int32 words, bit t % 32 of word t // 32 allows
token t.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


WORD_BITS = 32
_WORD_RANGE = 1 << WORD_BITS
_SIGN_BIT = 1 << (WORD_BITS - 1)


def bad_word_bans(output_ids: Sequence[int], phrases: list[list[int]]) -> set[int]:
    """Tokens to ban next so that no phrase appears in the output.

    A phrase's last token is banned when the output ends with the rest of the phrase;
    a one-token phrase is always banned. Empty phrases are ignored."""
    output = list(output_ids)
    bans: set[int] = set()
    for phrase in phrases:
        if not phrase:
            continue
        prefix = list(phrase[:-1])
        # Guard the length first: a negative slice start would wrap around.
        if len(output) >= len(prefix) and output[len(output) - len(prefix):] == prefix:
            bans.add(phrase[-1])
    return bans


def no_repeat_ngram_bans(token_ids: Sequence[int], n: int) -> set[int]:
    """Tokens that would complete an n-gram already present in token_ids (prompt + output).

    HF's NoRepeatNGramLogitsProcessor: the last n - 1 tokens are matched against every earlier
    n-gram's first n - 1 tokens, and each match's last token is banned. n <= 0 is off.
    O(len(token_ids) * n) per call."""
    tokens = list(token_ids)
    if n <= 0 or len(tokens) + 1 < n:
        return set()
    suffix = tokens[len(tokens) - (n - 1):] if n > 1 else []
    return {tokens[i + n - 1] for i in range(len(tokens) - n + 1) if tokens[i:i + n - 1] == suffix}


def stop_bans(num_output: int, min_tokens: int, num_total: int, min_total_tokens: int | None,
              stop_ids: Iterable[int]) -> set[int]:
    """EOS and stop token ids to ban this step: all of them while the output is shorter than
    min_tokens or the whole sequence (prompt + output) shorter than min_total_tokens."""
    too_short = num_output < min_tokens or num_total < (min_total_tokens or 0)
    return set(stop_ids) if too_short else set()


def num_words(vocab_size: int) -> int:
    """Packed mask words per row: ceil(vocab_size / 32)."""
    return -(-vocab_size // WORD_BITS)


def pack_allowed(allowed_ids: Iterable[int] | None, vocab_size: int) -> list[int]:
    """Packed int32 words allowing exactly allowed_ids; None allows every token (all words -1).

    Words are returned as signed Python ints within int32, ready for an int32 array."""
    if allowed_ids is None:
        return [-1] * num_words(vocab_size)
    words = [0] * num_words(vocab_size)
    for token in allowed_ids:
        if not 0 <= token < vocab_size:
            raise ValueError(f"token id {token} outside the vocabulary of {vocab_size}")
        words[token // WORD_BITS] |= 1 << (token % WORD_BITS)
    return [word - _WORD_RANGE if word & _SIGN_BIT else word for word in words]


def pack_banned(banned_ids: Iterable[int], vocab_size: int) -> list[int]:
    """Packed int32 words allowing every token but banned_ids (ids outside the vocabulary are ignored)."""
    words = [_WORD_RANGE - 1] * num_words(vocab_size)
    for token in banned_ids:
        if 0 <= token < vocab_size:
            words[token // WORD_BITS] &= ~(1 << (token % WORD_BITS))
    return [word - _WORD_RANGE if word & _SIGN_BIT else word for word in words]


def force_token(token_id: int, vocab_size: int) -> list[int]:
    """Packed words allowing only token_id, so the sampler must emit it next."""
    return pack_allowed([token_id], vocab_size)


def allow_token(words, token_id: int):
    """A copy of packed words (a list or an int32 array) that also allows token_id."""
    allowed = words.copy()
    bit = 1 << (token_id % WORD_BITS)
    word = (int(allowed[token_id // WORD_BITS]) & (_WORD_RANGE - 1)) | bit
    allowed[token_id // WORD_BITS] = word - _WORD_RANGE if word & _SIGN_BIT else word
    return allowed
