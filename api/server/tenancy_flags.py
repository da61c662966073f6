"""`flint serve`'s flags for many tenants: API keys, the keys granted the priority tier, how
the prefix cache is isolated, and how long a session stays live (api/core/tenancy.py)."""

from __future__ import annotations

import argparse
import os

from api.core.tenancy import CACHE_ISOLATIONS, SHARED
from api.server.flag_types import at_least
from engine.config import EngineConfig


def add_tenancy_arguments(serve: argparse.ArgumentParser) -> None:
    # No argparse default for the keys: `append` would add to it rather than replace it.
    serve.add_argument("--api-key", metavar="KEY", action="append",
                       help="require this key on /v1 requests (Authorization: Bearer, or x-api-key); give it "
                            "several times for several keys (default: $FLINT_API_KEY, comma-separated keys, "
                            "else no key)")
    serve.add_argument("--priority-api-key", metavar="KEY", action="append", default=[],
                       help="a key granted the priority service tier, and a valid key too (repeatable); once "
                            "any is given, a request asking for priority with another key gets 403 (default: "
                            "anyone may ask for priority)")
    serve.add_argument("--cache-isolation", choices=CACHE_ISOLATIONS, default=SHARED,
                       help="shared: requests share the prefix cache unless they name a "
                            "prompt_cache_isolation_key; api-key: each API key has its own (default: %(default)s)")
    serve.add_argument("--session-ttl", metavar="SECONDS", type=at_least(0, float), default=EngineConfig.session_ttl,
                       help="seconds a session (prompt_cache_key, x-session-affinity, x-multi-turn-session-id) "
                            "stays live after its last request: its cached pages are evicted last until then "
                            "(default: %(default)s)")



def api_keys_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The --api-key flags, else the comma-separated keys of $FLINT_API_KEY."""
    keys = args.api_key if args.api_key is not None else os.environ.get("FLINT_API_KEY", "").split(",")
    return tuple(key.strip() for key in keys if key.strip())


def tenancy_options(args: argparse.Namespace) -> dict:
    """Settings' tenancy fields from the flags (the first key is `api_key`, as with one key)."""
    keys = api_keys_of(args)
    return {"api_key": keys[0] if keys else None, "api_keys": keys[1:],
            "priority_api_keys": tuple(args.priority_api_key), "cache_isolation": args.cache_isolation}
