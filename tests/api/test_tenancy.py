"""api/core/tenancy.py, admission by tier and the tenancy flags, without an engine: each
dialect's words for the tiers, the priority grant, isolation salts, session headers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from api.core.admission import admit, release
from api.core.errors import ApiError
from api.core.tenancy import (
    DEFAULT,
    KEY_TIER,
    PRIORITY,
    Ask,
    anthropic_ask,
    isolation_salt,
    openai_ask,
    tenancy_of,
)
from api.server.cli import build_parser
from api.server.serve import settings_from_args
from api.server.settings import Settings
from engine.config import EngineConfig


@pytest.mark.parametrize("tier, expected", [("priority", PRIORITY), ("auto", DEFAULT), ("default", DEFAULT),
                                            ("flex", DEFAULT), ("scale", DEFAULT), (None, DEFAULT)])
def test_openai_and_fireworks_tiers(tier, expected):
    body = SimpleNamespace(service_tier=tier, prompt_cache_isolation_key="k", prompt_cache_key="s")
    assert openai_ask(body) == Ask(tier=expected, isolation_key="k", session="s")
    assert openai_ask(SimpleNamespace()) == Ask()  # a body without the fields (Friendli's)


def test_anthropic_auto_is_the_key_s_tier():
    assert anthropic_ask(SimpleNamespace(service_tier="standard_only")).tier == DEFAULT
    assert anthropic_ask(SimpleNamespace(service_tier="auto")).tier == KEY_TIER
    assert anthropic_ask(SimpleNamespace(service_tier=None)).tier == KEY_TIER
    granting = Settings(priority_api_keys=("gold",))
    assert tenancy_of(Ask(tier=KEY_TIER), granting, "gold", {}).tier == PRIORITY
    assert tenancy_of(Ask(tier=KEY_TIER), granting, "alice", {}).tier == DEFAULT
    assert tenancy_of(Ask(tier=KEY_TIER), Settings(), None, {}).tier == DEFAULT  # nobody is granted it


def test_priority_is_anyone_s_until_keys_are_granted_it():
    assert tenancy_of(Ask(tier=PRIORITY), Settings(), None, {}).priority
    granting = Settings(api_key="alice", priority_api_keys=("gold",))
    assert tenancy_of(Ask(tier=PRIORITY), granting, "gold", {}).priority
    for key in ("alice", None):
        with pytest.raises(ApiError) as refused:
            tenancy_of(Ask(tier=PRIORITY), granting, key, {})
        assert refused.value.status_code == 403 and refused.value.param == "service_tier"
        assert "`service_tier`" in refused.value.message


def test_isolation_salts():
    shared = Settings()
    assert tenancy_of(Ask(), shared, "alice", {}).cache_isolation == b""  # the shared cache
    a, b = (tenancy_of(Ask(isolation_key=key), shared, "alice", {}).cache_isolation for key in ("a", "b"))
    assert a and b and a != b and a == tenancy_of(Ask(isolation_key="a"), shared, "bob", {}).cache_isolation
    per_key = Settings(cache_isolation="api-key")
    alice, bob = (tenancy_of(Ask(isolation_key="a"), per_key, key, {}).cache_isolation for key in ("alice", "bob"))
    assert len({a, alice, bob}) == 3  # naming another tenant's isolation key reads nothing of it
    assert tenancy_of(Ask(), per_key, "alice", {}).cache_isolation == isolation_salt(None, "alice") != b""
    assert isolation_salt("ab", None) != isolation_salt("a", "b") != isolation_salt(None, "ab")


def test_session_ids_come_from_the_body_then_the_headers():
    shared = Settings()
    both = {"x-session-affinity": "one", "x-multi-turn-session-id": "two"}
    by_body = tenancy_of(Ask(session="one"), shared, None, {}).session
    assert by_body is not None and len(by_body) == 32  # a fixed-size digest, not the client's text
    assert tenancy_of(Ask(), shared, None, both).session == by_body
    assert tenancy_of(Ask(), shared, None, {"x-multi-turn-session-id": "one"}).session == by_body
    assert tenancy_of(Ask(session="two"), shared, None, both).session != by_body
    assert tenancy_of(Ask(), shared, None, {}).session is None
    isolated = tenancy_of(Ask(session="one", isolation_key="k"), shared, None, {}).session
    assert isolated != by_body  # tenants' sessions never mix


def test_the_priority_tier_is_admitted_past_a_full_default_queue():
    engine = EngineConfig(max_model_len=64, max_num_seqs=2, max_num_batched_tokens=8, num_pages=8)
    server = SimpleNamespace(settings=Settings(engine=engine, max_waiting=1), num_admitted_choices=0,
                             num_admitted_priority=0)
    admit(server, 3)  # a full server: 2 running, 1 waiting
    with pytest.raises(ApiError) as full:
        admit(server, 1)
    assert full.value.status_code == 429
    admit(server, 3, priority=True)  # the priority tier has room of its own
    assert (server.num_admitted_choices, server.num_admitted_priority) == (6, 3)
    with pytest.raises(ApiError):
        admit(server, 1, priority=True)
    release(server, 3, priority=True)
    release(server, 3)
    assert (server.num_admitted_choices, server.num_admitted_priority) == (0, 0)


def parse(*flags: str) -> Settings:
    return settings_from_args(build_parser().parse_args(["serve", *flags]))


def test_the_tenancy_flags_reach_the_settings(monkeypatch):
    monkeypatch.setenv("FLINT_API_KEY", "one, two")
    assert parse().valid_api_keys == ("one", "two")
    parsed = parse("--api-key", "a", "--api-key", "b", "--priority-api-key", "gold", "--cache-isolation", "api-key",
                   "--session-ttl", "30")
    assert parsed.valid_api_keys == ("a", "b", "gold") and parsed.priority_api_keys == ("gold",)
    assert parsed.cache_isolation == "api-key" and parsed.engine.session_ttl == 30
    monkeypatch.delenv("FLINT_API_KEY")
    defaults = parse()
    assert defaults.valid_api_keys == () and defaults.cache_isolation == "shared"
    assert defaults.engine.session_ttl == EngineConfig().session_ttl
    with pytest.raises(SystemExit):
        parse("--cache-isolation", "per-user")
