"""Test helpers shared by the block manager and scheduler tests (host only, no jax)."""

from __future__ import annotations


def prefix_ids(token_ids: list[int]) -> list[int]:
    """An identity for the KV of each position: it depends on the token and all before it."""
    ids, running = [], 0
    for token in token_ids:
        running = hash((running, token))
        ids.append(running)
    return ids
