"""A bounded mixed load against a live Flint server, and the checks that it came through.

    python tools/soak.py http://127.0.0.1:8000 --requests 1000 --concurrency 16

Sends `--requests` requests (tools/soak/requests.py: every dialect, whole and streamed, n > 1,
stop strings, logprobs, stored completions and responses retrieved afterwards, bad bodies),
`--concurrency` at a time, after a warm-up pass of every kind once. A tenth of the streams
(`--drop-rate`) are dropped after their first events, the connection closed mid-way. Then
it checks (tools/soak/report.py): no 5xx; every request not dropped completed (a stream with
its dialect's terminal event, a whole answer valid JSON of its shape, a bad body refused
with a 4xx); once the load has drained, no KV-cache page held (`flint:kv_cache_pages_in_use`;
pages kept by the prefix cache are free to take, not leaked); no program compiled while
any request ran, warm-up included (`flint:programs_compiled_while_serving_total` did not
grow: start-up compiles every program serving needs); and the server's resident memory
within `--memory-tolerance` of what it was after the warm-up. It prints a summary and exits
1 when a check fails.

The server should serve nothing else meanwhile: the drain and memory checks read the
server's /metrics as a whole."""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tools.soak.report import Report, Result
from tools.soak.requests import RETRIEVE, Case, all_cases, stream_problem, whole_problem

DROP_AFTER_EVENTS = 3  # a dropped stream closes its connection after this many events


@dataclass(frozen=True)
class Planned:
    case: Case
    drop: bool = False  # close the connection after DROP_AFTER_EVENTS events


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--requests", type=int, default=1000, help="requests after the warm-up (default: %(default)s)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight at once (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per answer (default: %(default)s)")
    parser.add_argument("--drop-rate", type=float, default=0.1, help="streams dropped mid-way (default: %(default)s)")
    parser.add_argument("--memory-tolerance", type=float, default=0.10,
                        help="resident memory growth allowed, as a fraction (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the order of the requests (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per request (default: %(default)s)")
    parser.add_argument("--drain-timeout", type=float, default=120,
                        help="seconds to wait for the server to go idle (default: %(default)s)")
    parser.add_argument("--api-key", default=None, help="sent as Authorization: Bearer")
    return parser.parse_args(argv)


def plan(cases: list[Case], num_requests: int, drop_rate: float, seed: int) -> list[Planned]:
    """Every case equally often, shuffled; `drop_rate` of the streams dropped, evenly spread."""
    picked = [cases[index % len(cases)] for index in range(num_requests)]
    random.Random(seed).shuffle(picked)
    planned, num_streams = [], 0
    for case in picked:
        drop = case.stream and int((num_streams + 1) * drop_rate) > int(num_streams * drop_rate)
        num_streams += case.stream
        planned.append(Planned(case, drop))
    return planned


def payload(case: Case) -> dict[str, Any]:
    if isinstance(case.body, bytes):
        return {"content": case.body, "headers": case.extra_headers}
    return {"json": case.body, "headers": case.extra_headers}


async def send(client: httpx.AsyncClient, planned: Planned) -> Result:
    case, started = planned.case, time.perf_counter()
    dropped = False
    try:
        if case.stream:
            status, problem, dropped = await send_stream(client, case, planned.drop)
        else:
            status, problem = await send_whole(client, case)
    except httpx.HTTPError as error:
        status, problem = None, f"{type(error).__name__}: {error}"
    return Result(case, status, time.perf_counter() - started, dropped, problem)


async def send_whole(client: httpx.AsyncClient, case: Case) -> tuple[int, str | None]:
    response = await client.post(case.path, **payload(case))
    status = response.status_code
    if case.bad:
        return status, None if 400 <= status < 500 else f"a bad body answered {status}, not a 4xx"
    if status != 200:
        return status, f"HTTP {status}: {response.text[:200]}"
    try:
        answer = response.json()
    except ValueError:
        return status, "the answer is not JSON"
    problem = whole_problem(case, answer)
    if problem is None and case.stored:
        problem = await retrieval_problem(client, case, answer["id"])
    return status, problem


async def retrieval_problem(client: httpx.AsyncClient, case: Case, object_id: str) -> str | None:
    response = await client.get(RETRIEVE[case.dialect].format(id=object_id))
    if response.status_code != 200 or response.json().get("id") != object_id:
        return f"the stored {object_id} was not retrieved: HTTP {response.status_code}"
    return None


async def send_stream(client: httpx.AsyncClient, case: Case, drop: bool) -> tuple[int, str | None, bool]:
    """Read a stream to its end, or drop it (leaving the block closes the connection)."""
    async with client.stream("POST", case.path, **payload(case)) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, f"HTTP {response.status_code}: {response.text[:200]}", False
        lines, num_events = [], 0
        async for line in response.aiter_lines():
            lines.append(line)
            num_events += line.startswith("data: ")
            if drop and num_events >= DROP_AFTER_EVENTS:
                return response.status_code, None, True
        return response.status_code, stream_problem(case, lines), False


async def run_load(client: httpx.AsyncClient, planned: list[Planned], concurrency: int) -> list[Result]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(item: Planned) -> Result:
        async with semaphore:
            return await send(client, item)

    return list(await asyncio.gather(*(one(item) for item in planned)))


async def scrape(client: httpx.AsyncClient) -> dict[str, float]:
    """The unlabelled samples of /metrics (Flint's own names and the process's), by name."""
    response = await client.get("/metrics")
    response.raise_for_status()
    return {sample.name: sample.value for family in text_string_to_metric_families(response.text)
            for sample in family.samples if not sample.labels}


async def wait_until_idle(client: httpx.AsyncClient, timeout: float) -> dict[str, float] | None:
    """The metrics once nothing runs or waits (dropped streams' requests abort within a
    step of the engine); None if the server is still busy after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = await scrape(client)
        if not metrics["flint:num_requests_running"] and not metrics["flint:num_requests_waiting"]:
            return metrics
        if time.monotonic() > deadline:
            return None
        await asyncio.sleep(0.1)


async def soak(args: argparse.Namespace) -> Report:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=args.concurrency + 2)
    async with httpx.AsyncClient(base_url=args.url, timeout=args.timeout, headers=headers, limits=limits) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]
        cases = all_cases(model, args.max_tokens)
        start = await wait_until_idle(client, args.drain_timeout)
        warmup = await run_load(client, [Planned(case) for case in cases], args.concurrency)
        before = await wait_until_idle(client, args.drain_timeout)
        started = time.perf_counter()
        results = await run_load(client, plan(cases, args.requests, args.drop_rate, args.seed), args.concurrency)
        seconds = time.perf_counter() - started
        after = await wait_until_idle(client, args.drain_timeout)
    return Report(warmup, results, seconds, start, before, after, args.memory_tolerance)


def run(argv: list[str] | None = None) -> Report:
    """Soak the server the arguments name; the report (see `Report.failures`)."""
    return asyncio.run(soak(parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    report = run(argv)
    print(report.summary())
    failures = report.failures()
    for failure in failures:
        print(f"FAILED: {failure}")
    print("soak: " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0

