"""Replaced input embeddings (Friendli's `embedding_to_replace` / `token_index_to_replace`).

A request may give, for some prompt positions, an input embedding to use in place of the
token's own (a soft prompt, or another model's embedding of an image). Host side only:

- `check_embeddings`: each position inside the prompt, once, with hidden_size values.
- The step's batch has a fixed number of replacement rows (EngineConfig.max_embedding_rows,
  engine/device/batch.py), so the shape stays static; the scheduler ends a prompt chunk early
  (`chunk_within`) rather than let one step carry more replacements than that.
- The prefix cache: KV computed from replaced embeddings is not the KV of the prompt's
  tokens, so such a sequence's page hashes start from `cache_salt` (a digest of its
  replacements) instead of the empty root: only a request with the very same replacements
  shares its pages, and a plain prompt never reads them.
- Preemption recomputes a sequence from its tokens; the replacements are looked up by
  position whenever a chunk is planned (`replaced_between`), so they apply again.
"""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_left
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.host.request import EmbeddingReplacement, Request
    from engine.host.sequence import Sequence


def check_embeddings(request: Request, hidden_size: int) -> None:
    """ValueError unless every replacement names a distinct prompt position and has
    `hidden_size` values."""
    positions = [replacement.position for replacement in request.embeddings]
    if len(set(positions)) != len(positions):
        raise ValueError("a prompt position's embedding is replaced more than once")
    num_prompt = len(request.prompt_token_ids)
    for replacement in request.embeddings:
        if not 0 <= replacement.position < num_prompt:
            raise ValueError(f"replaced embedding position {replacement.position} lies outside "
                             f"the prompt's {num_prompt} tokens")
        if len(replacement.values) != hidden_size:
            raise ValueError(f"a replaced embedding has {len(replacement.values)} values; "
                             f"the model's hidden size is {hidden_size}")


def sorted_replacements(replacements: tuple[EmbeddingReplacement, ...]) -> tuple[EmbeddingReplacement, ...]:
    return tuple(sorted(replacements, key=lambda replacement: replacement.position))


def cache_salt(replacements: tuple[EmbeddingReplacement, ...]) -> bytes:
    """The root of a sequence's page-hash chain: empty without replacements, else a digest
    of every (position, values), so equal prompts with other embeddings never share pages."""
    if not replacements:
        return b""
    digest = hashlib.blake2b(b"embeddings", digest_size=16)
    for replacement in sorted_replacements(replacements):
        digest.update(array("q", [replacement.position]).tobytes())
        digest.update(array("d", replacement.values).tobytes())
    return digest.digest()


def replaced_between(seq: Sequence, start: int, count: int) -> tuple[EmbeddingReplacement, ...]:
    """`seq`'s replacements at positions [start, start + count) (seq.embeddings is sorted)."""
    if not seq.embeddings:
        return ()
    positions = seq.embedding_positions
    return seq.embeddings[bisect_left(positions, start): bisect_left(positions, start + count)]


def chunk_within(seq: Sequence, start: int, wanted: int, rows_left: int) -> int:
    """The most of `wanted` tokens from `start` whose replacements fit in `rows_left` rows:
    the chunk ends just before the first replacement that would not (0: none fits)."""
    replaced = replaced_between(seq, start, wanted)
    if len(replaced) <= rows_left:
        return wanted
    return replaced[rows_left].position - start
