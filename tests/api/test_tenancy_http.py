"""Many tenants through HTTP, with the openai and anthropic SDKs against a live server
(api/core/tenancy.py): the priority tier served ahead of a saturated default tier, priority
keys, the tier each dialect reports, prefix caches isolated by key (checked in the block
manager's pages, not only in usage) and sessions kept with their metrics.

One app serves every test: keys `alice` and `bob`, and `gold` granted the priority tier;
each API key has a prefix cache of its own (`--cache-isolation api-key`)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import anthropic
import httpx
import openai
import pytest
from api_helpers import TINY_ENGINE, live_app
from prometheus_client.parser import text_string_to_metric_families

from api.server.settings import Settings

MODEL = "SmolLM2-135M-Instruct"
MAX_NUM_SEQS = 4
PAGE = TINY_ENGINE.page_size
LONG_PROMPT = [(7 * i) % 3000 + 100 for i in range(100)]  # 6 full pages before the last token
CACHED = (len(LONG_PROMPT) - 1) // PAGE * PAGE


class EngineWatch:
    """What the engine thread does, recorded by wrapping its Engine: each request as it is
    added (with the step count and the load then), the step of its first output, and the
    pages and hashes each sequence held when it was freed."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.lock = threading.Lock()
        self.steps = 0
        self.added: dict[str, tuple] = {}  # request id -> (request, step, running, waiting)
        self.first_output: dict[str, int] = {}  # request id -> step of its first output
        self.freed: dict[str, tuple[list[int], list[bytes]]] = {}
        add, step, free = engine.add_request, engine.step, engine.block_manager.free

        def add_request(request):
            scheduler = engine.scheduler
            with self.lock:
                self.added[request.request_id] = (request, self.steps, scheduler.num_running, scheduler.num_waiting)
            return add(request)

        def counted_step():
            outputs = step()
            with self.lock:
                self.steps += 1
                for output in outputs:
                    self.first_output.setdefault(output.request_id, self.steps)
            return outputs

        def recorded_free(seq):
            with self.lock:
                self.freed.setdefault(seq.request_id, (list(seq.block_table), list(seq.block_hashes)))
            return free(seq)

        engine.add_request, engine.step, engine.block_manager.free = add_request, counted_step, recorded_free

    def request(self, prefix: str):
        """The engine request whose id starts with `prefix` (an HTTP request id), and its record."""
        with self.lock:
            [(request_id, record)] = [(key, value) for key, value in self.added.items() if key.startswith(prefix)]
        return request_id, record

    def steps_to_first_output(self, request_id: str) -> int:
        with self.lock:
            return self.first_output[request_id] - self.added[request_id][1]


@pytest.fixture(scope="module")
def server(tiny_app_factory):
    """(base URL, the app's engine, its EngineWatch)."""
    engine_config = dataclasses.replace(TINY_ENGINE, max_num_seqs=MAX_NUM_SEQS)
    settings = Settings(engine=engine_config, api_keys=("alice", "bob"), priority_api_keys=("gold",),
                        cache_isolation="api-key")
    app = tiny_app_factory(settings)
    with live_app(app) as base_url:
        engine = app.state.server.running_engine.engine
        yield base_url, engine, EngineWatch(engine)


def sdk(server, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key=key, max_retries=0, timeout=300)


def async_sdk(server, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{server[0]}/v1", api_key=key, max_retries=0, timeout=300)


def request_id_of(response) -> str:
    return response.headers["x-request-id"]


def complete(server, key: str, prompt, **fields):
    """A greedy one-token completion; (its usage, the engine request it made)."""
    raw = sdk(server, key).completions.with_raw_response.create(model=MODEL, prompt=prompt, max_tokens=1,
                                                                 temperature=0, **fields)
    _, (request, *_) = server[2].request(request_id_of(raw))
    return raw.parse().usage, request


def metrics(server) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{server[0]}/metrics", timeout=30).text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def check_no_page_leak(engine) -> None:
    stats = engine.stats()
    assert stats.num_running == stats.num_waiting == 0 and stats.num_pages_in_use == 0


# --- isolated prefix caches ------------------------------------------------------------------

def test_isolation_keys_partition_the_prefix_cache(server):
    """One key's prompt, then another's, then each again: each key finds only its own pages,
    in the HTTP usage and in the pages its sequences held."""
    watch = server[2]
    usages, requests = [], []
    for key in ("tenant-a", "tenant-b", "tenant-a", "tenant-b"):
        usage, request = complete(server, "alice", LONG_PROMPT, extra_body={"prompt_cache_isolation_key": key})
        usages.append(usage.prompt_tokens_details.cached_tokens)
        requests.append(request.request_id)
    # The same prompt under another key shares nothing; under its own key again, the whole
    # prefix (so the other key's miss was not a cache that finds nothing).
    assert usages == [0, 0, CACHED, CACHED]
    a, b, a_again, b_again = (watch.freed[request_id][0] for request_id in requests)
    assert not set(a) & set(b)
    assert a_again[:CACHED // PAGE] == a[:CACHED // PAGE] and b_again[:CACHED // PAGE] == b[:CACHED // PAGE]


def test_api_keys_isolate_the_cache_when_the_server_says_so(server):
    prompt = [token + 1 for token in LONG_PROMPT]
    alice, _ = complete(server, "alice", prompt)
    bob, _ = complete(server, "bob", prompt)
    bob_naming_alice_s_key, _ = complete(server, "bob", prompt, extra_body={"prompt_cache_isolation_key": "tenant-a"})
    alice_again, _ = complete(server, "alice", prompt)
    assert alice.prompt_tokens_details.cached_tokens == bob.prompt_tokens_details.cached_tokens == 0
    assert bob_naming_alice_s_key.prompt_tokens_details.cached_tokens == 0
    assert alice_again.prompt_tokens_details.cached_tokens == CACHED


def test_anthropic_cache_reads_stay_within_the_key(server):
    messages = [{"role": "user", "content": "Tell me about page tables. " * 12}]
    replies = []
    for key in ("alice", "bob", "alice"):
        client = anthropic.Anthropic(base_url=server[0], api_key=key, max_retries=0, timeout=300)
        replies.append(client.messages.create(model=MODEL, messages=messages, max_tokens=1))
    reads = [reply.usage.cache_read_input_tokens for reply in replies]
    assert reads[0] == reads[1] == 0 and reads[2] > 0


# --- service tiers ---------------------------------------------------------------------------

def test_a_priority_request_is_served_ahead_of_a_saturated_default_tier(server):
    base_url, engine, watch = server
    messages = [{"role": "user", "content": "Say something short."}]

    def priority_chat():
        return async_sdk(server, "gold").chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, max_completion_tokens=4, temperature=0, service_tier="priority")

    async def run():
        idle = await priority_chat()
        client = async_sdk(server, "alice")
        defaults = [asyncio.create_task(client.completions.create(
            model=MODEL, prompt=[300 + 11 * stream + i for i in range(20)], max_tokens=48, temperature=0,
            extra_body={"ignore_eos": True})) for stream in range(2 * MAX_NUM_SEQS)]
        deadline = asyncio.get_running_loop().time() + 120
        while engine.stats().num_running < MAX_NUM_SEQS or engine.stats().num_waiting < 1:
            assert asyncio.get_running_loop().time() < deadline, "the default tier never saturated the engine"
            await asyncio.sleep(0.005)
        queues = metrics(server)  # per-tier queue depth, while the default tier fills the engine
        busy = await priority_chat()
        return idle, busy, await asyncio.gather(*defaults), queues

    idle, busy, completions, queues = asyncio.run(run())
    assert queues[("flint:tier_requests_running", (("tier", "default"),))] == MAX_NUM_SEQS
    assert queues[("flint:tier_requests_waiting", (("tier", "default"),))] >= 1
    assert queues[("flint:tier_requests_waiting", (("tier", "priority"),))] == 0
    idle_id, _ = watch.request(request_id_of(idle))
    busy_id, (busy_request, _, running, waiting) = watch.request(request_id_of(busy))
    assert busy_request.priority and running == MAX_NUM_SEQS and waiting >= 1  # it met a saturated engine
    # Each engine step lands one decode window: the busy server answers within 2 windows of the idle one.
    assert watch.steps_to_first_output(busy_id) <= watch.steps_to_first_output(idle_id) + 2
    assert busy.parse().service_tier == "priority" and busy.parse().choices[0].finish_reason == "length"
    # The default tier's work still completes, in full, and every page comes back.
    assert all(completion.choices[0].finish_reason == "length" and completion.usage.completion_tokens == 48
               for completion in completions)
    check_no_page_leak(engine)
    scraped = metrics(server)
    assert scraped[("flint:tier_time_to_first_token_seconds_count", (("tier", "priority"),))] >= 2
    assert scraped[("flint:tier_e2e_request_latency_seconds_count", (("tier", "default"),))] >= 8


def test_priority_needs_a_priority_key_where_the_server_names_them(server):
    with pytest.raises(openai.PermissionDeniedError) as refused:
        sdk(server, "alice").chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                     max_completion_tokens=1, service_tier="priority")
    assert refused.value.status_code == 403 and refused.value.body["param"] == "service_tier"
    response = httpx.post(f"{server[0]}/v1/completions", headers={"Authorization": "Bearer bob"}, timeout=60,
                          json={"prompt": "hi", "max_tokens": 1, "service_tier": "priority"})
    assert response.status_code == 403 and response.json()["error"]["param"] == "service_tier"
    # Every configured key opens the API, priority keys too; any other is a 401.
    for key, status in (("alice", 200), ("bob", 200), ("gold", 200), ("mallory", 401)):
        assert httpx.get(f"{server[0]}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == status
    # The default tier, in any of its words, needs no grant.
    for tier in ("auto", "default", "flex"):
        usage, request = complete(server, "alice", "hi", extra_body={"service_tier": tier})
        assert not request.priority and usage.completion_tokens == 1


def test_tiers_are_reported_in_every_dialect(server):
    messages = [{"role": "user", "content": "hi"}]
    gold, alice = sdk(server, "gold"), sdk(server, "alice")
    assert gold.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=1,
                                        service_tier="priority").service_tier == "priority"
    assert alice.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=1,
                                         service_tier="flex").service_tier == "default"
    chunks = list(gold.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=2,
                                               service_tier="priority", stream=True))
    assert chunks and all(chunk.service_tier == "priority" for chunk in chunks)
    assert gold.responses.create(model=MODEL, input="hi", max_output_tokens=16,
                                 service_tier="priority").service_tier == "priority"
    assert alice.responses.create(model=MODEL, input="hi", max_output_tokens=16).service_tier == "default"


def test_anthropic_auto_uses_the_key_s_tier(server):
    watch = server[2]

    def create(key: str, **fields):
        client = anthropic.Anthropic(base_url=server[0], api_key=key, max_retries=0, timeout=300)
        raw = client.messages.with_raw_response.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                       max_tokens=1, **fields)
        _, (request, *_) = watch.request(request_id_of(raw))
        return raw.parse().usage.service_tier, request.priority

    assert create("gold") == ("priority", True)  # auto, by default
    assert create("gold", service_tier="auto") == ("priority", True)
    assert create("gold", service_tier="standard_only") == ("standard", False)
    assert create("alice", service_tier="auto") == ("standard", False)


# --- session affinity ------------------------------------------------------------------------

def test_session_ids_keep_their_pages_and_move_the_metrics(server):
    watch = server[2]
    before = metrics(server)
    turn = [token + 7 for token in LONG_PROMPT]
    first, request = complete(server, "alice", turn, extra_body={"prompt_cache_key": "conversation-1"})
    during = metrics(server)
    second, again = complete(server, "alice", turn, extra_body={"prompt_cache_key": "conversation-1"})
    after = metrics(server)
    assert request.session is not None and again.session == request.session
    assert first.prompt_tokens_details.cached_tokens == 0 and second.prompt_tokens_details.cached_tokens == CACHED

    def grew(name: str, earlier, later) -> float:
        return later[(name, ())] - earlier[(name, ())]

    assert grew("flint:session_prefix_cache_queries_total", before, after) == 2 * len(turn)
    assert grew("flint:session_prefix_cache_hits_total", before, after) == CACHED
    assert during[("flint:sessions_live", ())] >= 1 and during[("flint:kv_cache_pages_kept_for_sessions", ())] >= 6

    # The headers name sessions too, in every dialect: the body's prompt_cache_key first, then
    # x-session-affinity, then x-multi-turn-session-id.
    headers = {"x-session-affinity": "conversation-1", "x-multi-turn-session-id": "rollout-9"}
    _, by_header = complete(server, "alice", "hi", extra_headers=headers)
    _, by_turn_id = complete(server, "alice", "hi", extra_headers={"x-multi-turn-session-id": "rollout-9"})
    _, by_body = complete(server, "alice", "hi", extra_headers=headers, extra_body={"prompt_cache_key": "other"})
    assert by_header.session == request.session and by_turn_id.session not in (None, request.session)
    assert by_body.session not in (None, request.session, by_turn_id.session)
    client = anthropic.Anthropic(base_url=server[0], api_key="alice", max_retries=0, timeout=300)
    raw = client.messages.with_raw_response.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                   max_tokens=1, extra_headers={"x-multi-turn-session-id": "rollout-9"})
    assert watch.request(request_id_of(raw))[1][0].session == by_turn_id.session
    response = sdk(server, "alice").responses.with_raw_response.create(model=MODEL, input="hi", max_output_tokens=16,
                                                                       prompt_cache_key="conversation-1")
    assert watch.request(request_id_of(response))[1][0].session == request.session
    assert response.parse().prompt_cache_key == "conversation-1"  # and echoed
    # Another API key's session of the same name is another session (api-key isolation).
    _, bob = complete(server, "bob", "hi", extra_body={"prompt_cache_key": "conversation-1"})
    assert bob.session not in (None, request.session)
