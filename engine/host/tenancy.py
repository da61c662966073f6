"""Many tenants on one engine: service tiers, isolated prefix caches and sessions (host only).

A Request carries three tenancy fields, which the API fills from the HTTP request
(api/core/tenancy.py) and which each change one part of the host:
- `priority`: the scheduler (engine/host/scheduler.py) keeps priority sequences ahead of
  default-tier ones in both of its queues, admits them first, and preempts default-tier
  sequences (recomputed later, as any preempted sequence) rather than make a priority one
  wait for a sequence slot or for pages. A default-tier sequence never preempts a priority one.
- `cache_isolation`: an opaque salt (the API's digest of the tenant's isolation key, and of
  its API key when the server isolates by key). It roots the sequence's page-hash chain
  (`isolated`), as replaced embeddings and replayed routings do, so sequences with different
  salts never share a cached page: they can neither read each other's prefixes nor time them.
- `session`: the session the request belongs to. The block manager keeps the freed cached
  pages of a live session apart and evicts them last (engine/host/sessions.py).
"""

from __future__ import annotations

import hashlib


def isolated(salt: bytes, isolation: bytes) -> bytes:
    """The root of an isolated sequence's page-hash chain: `salt` (its own, from replaced
    embeddings or a replayed routing) digested with the isolation salt; `salt` itself when
    the sequence shares the cache."""
    if not isolation:
        return salt
    digest = hashlib.blake2b(b"isolation", digest_size=16)
    digest.update(len(salt).to_bytes(2, "little") + salt)  # the length keeps (salt, isolation) pairs apart
    digest.update(isolation)
    return digest.digest()
