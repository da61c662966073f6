"""Tenancy of one HTTP request: its service tier, its prefix-cache isolation and its session.

`tenancy_of` computes it once per request (api/core/pipeline.py), from what the body asks
(each dialect reads its own fields: `openai_ask`, `anthropic_ask`), the headers and the
presented API key; every engine request of the generation carries it
(engine/host/tenancy.py says what each part changes there).

- Tier: "priority" or "default". The Fireworks and OpenAI bodies ask with `service_tier`:
  "priority" is the priority tier, and every other value ("auto", "default", "flex",
  "scale") the default tier, as Fireworks' spec says. Anthropic's priority tier belongs to
  the account: `auto` (or no tier) uses it when the presented key is a priority key,
  `standard_only` never. Where `--priority-api-key` names keys, asking for priority with
  another key is a 403 naming `service_tier`; where none is named, anyone may ask.
- Isolation: `prompt_cache_isolation_key`, and with `--cache-isolation api-key` the
  presented key too, are digested into a salt that partitions the prefix cache. The API key
  is part of the salt, so a tenant who names another's isolation key still gets a cache of
  its own.
- Session: the body's `prompt_cache_key`, else the `x-session-affinity` header, else
  `x-multi-turn-session-id`. It is digested with the isolation salt into a fixed-size id,
  so a client's id is never stored as sent and tenants' sessions never mix.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from api.core.errors import ApiError
from api.core.refusals import plain

if TYPE_CHECKING:
    from api.server.settings import Settings

PRIORITY, DEFAULT = "priority", "default"
TIERS = (PRIORITY, DEFAULT)
KEY_TIER = "key"  # asked by Anthropic's `auto`: the presented key's own tier
SHARED, PER_API_KEY = "shared", "api-key"  # --cache-isolation
CACHE_ISOLATIONS = (SHARED, PER_API_KEY)
SESSION_HEADERS = ("x-session-affinity", "x-multi-turn-session-id")  # in order of precedence


@dataclass(frozen=True)
class Ask:
    """What a body asks of tenancy, in the server's words."""

    tier: str = DEFAULT  # PRIORITY, DEFAULT or KEY_TIER
    isolation_key: str | None = None
    session: str | None = None  # the body's own session id (prompt_cache_key)


@dataclass(frozen=True)
class Tenancy:
    """How one HTTP request is served among others."""

    tier: str = DEFAULT
    cache_isolation: bytes = b""  # the prefix-cache salt (b"": the shared cache)
    session: str | None = None  # its session's id (None: none)

    @property
    def priority(self) -> bool:
        return self.tier == PRIORITY


def openai_ask(body: Any) -> Ask:
    """The Fireworks and OpenAI fields (completions, chat, responses), where the body has them."""
    tier = plain(getattr(body, "service_tier", None))
    return Ask(tier=PRIORITY if tier == PRIORITY else DEFAULT,
               isolation_key=getattr(body, "prompt_cache_isolation_key", None),
               session=getattr(body, "prompt_cache_key", None))


def anthropic_ask(body: Any) -> Ask:
    """Anthropic's `service_tier`: `standard_only` keeps to the default tier, `auto` (the
    default) uses the key's own."""
    return Ask(tier=DEFAULT if plain(getattr(body, "service_tier", None)) == "standard_only" else KEY_TIER)


def tenancy_of(ask: Ask, settings: Settings, api_key: str | None, headers: Mapping[str, str]) -> Tenancy:
    """The request's tenancy; a 403 naming `service_tier` when it asks for priority with a
    key that is not a priority key (where some are configured)."""
    isolation = isolation_salt(ask.isolation_key, api_key if settings.cache_isolation == PER_API_KEY else None)
    session = ask.session or next((headers[name] for name in SESSION_HEADERS if headers.get(name)), None)
    return Tenancy(tier=tier_of(ask.tier, settings.priority_api_keys, api_key), cache_isolation=isolation,
                   session=session_id(isolation, session) if session else None)


def tier_of(asked: str, priority_keys: tuple[str, ...], api_key: str | None) -> str:
    granted = api_key is not None and any_equal(api_key, priority_keys)
    if asked == KEY_TIER:
        return PRIORITY if granted else DEFAULT
    if asked == PRIORITY and priority_keys and not granted:
        raise ApiError(403, "`service_tier`: the priority tier is not granted to this API key; ask for the "
                            "default tier, or use a key the server grants priority (--priority-api-key).",
                       param="service_tier", error_type="permission_error", code="priority_not_granted")
    return asked


def any_equal(key: str, keys: Iterable[str]) -> bool:
    """Whether `key` is one of `keys`, compared in constant time (every key is compared)."""
    matches = [hmac.compare_digest(key.encode(), candidate.encode()) for candidate in keys]
    return any(matches)


def isolation_salt(isolation_key: str | None, api_key: str | None) -> bytes:
    """The prefix-cache salt of an isolation key and an API key (either may be absent);
    b"" when both are: the shared cache."""
    if isolation_key is None and api_key is None:
        return b""
    digest = hashlib.blake2b(b"flint-cache-isolation", digest_size=16)
    for part in (api_key, isolation_key):
        data = b"\x00" if part is None else b"\x01" + part.encode()
        digest.update(len(data).to_bytes(8, "little") + data)  # lengths keep (a, b) pairs apart
    return digest.digest()


def session_id(isolation: bytes, session: str) -> str:
    return hashlib.blake2b(bytes([len(isolation)]) + isolation + session.encode(), digest_size=16).hexdigest()
