"""The results of tools/bench.py serve: one summary, as plain JSON values, and the Markdown
report printed from it.

The printed tables, results.json and the plots (tools/bench/plot.py) all read the same
summary, so they can never disagree, and a saved summary can be plotted again without
running the benchmark.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from datetime import datetime, timezone

SERVERS = ("Flint", "llama-server")


def best(turns: list[dict], concurrency: int) -> tuple[float, float, float]:
    """The best tok/s, mean TTFT and median TTFT over the rounds, each on its own."""
    runs = [turn[concurrency] for turn in turns]
    return (max(r.tokens_per_second for r in runs), min(statistics.mean(r.ttfts) for r in runs),
            min(statistics.median(r.ttfts) for r in runs))


def server_figures(concurrency: list[int], server, turns: list[dict]) -> dict:
    """One server's figures; the lists run parallel to `concurrency` (JSON keys would be strings)."""
    bests = [best(turns, n) for n in concurrency]
    return {"tokens_per_second": [b[0] for b in bests],
            "ttft_mean_s": [b[1] for b in bests],
            "ttft_median_s": [b[2] for b in bests],
            "ttft_long_prompt_s": min(turn["ttft"] for turn in turns),
            "healthy_after_s": server.healthy_after,
            "rss_bytes": server.rss_bytes,
            "rss_after_load_bytes": server.rss_after_load}


def summarize(args: argparse.Namespace, servers: dict, results: dict[str, list[dict]], *, model: str,
              setup: str, cold_start: float) -> dict:
    """The run's record: each server's best figures over the rounds (`results[name]` holds a
    turn per round: concurrency -> Run, and "ttft" -> seconds), the load and the machine."""
    from tools.bench.roofline import cpu_name

    return {"model": model, "setup": setup, "machine": cpu_name(),
            "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
            "command": shlex.join(["python", *sys.argv]),
            "load": {"prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens,
                     "temperature": args.temperature, "requests_per_client": args.requests_per_client,
                     "rounds": args.rounds, "ttft_prompt_tokens": args.ttft_prompt_tokens},
            "concurrency": list(args.concurrency),
            "flint_cold_start_s": cold_start,
            "servers": {name: server_figures(args.concurrency, servers[name], results[name]) for name in SERVERS}}


def print_report(summary: dict) -> None:
    """Markdown tables, ready for BENCHMARKS.md."""
    load = summary["load"]
    print(f"\n{summary['setup']}\nmachine: {summary['machine']}; {summary['date']}")
    print(f"command: {summary['command']}")
    print(f"{load['prompt_tokens']}-token prompts, {load['output_tokens']} output tokens, "
          f"temperature {load['temperature']:g}, EOS ignored, {load['requests_per_client']} requests per client; "
          f"best of {load['rounds']} alternating rounds\n")
    print_load_table(summary)
    print_server_table(summary)


def print_load_table(summary: dict) -> None:
    flint, llama = summary["servers"]["Flint"], summary["servers"]["llama-server"]
    print("| clients | Flint tok/s | llama-server tok/s | Flint / llama | Flint TTFT mean / median | "
          "llama-server TTFT mean / median |\n| --- | --- | --- | --- | --- | --- |")
    for i, concurrency in enumerate(summary["concurrency"]):
        f_tps, l_tps = flint["tokens_per_second"][i], llama["tokens_per_second"][i]
        print(f"| {concurrency} | {f_tps:.1f} | {l_tps:.1f} | {f_tps / l_tps:.2f} "
              f"| {flint['ttft_mean_s'][i]:.2f} / {flint['ttft_median_s'][i]:.2f} s "
              f"| {llama['ttft_mean_s'][i]:.2f} / {llama['ttft_median_s'][i]:.2f} s |")


def print_server_table(summary: dict) -> None:
    """The long prompt's TTFT, start-up and memory."""
    flint, llama = summary["servers"]["Flint"], summary["servers"]["llama-server"]
    print(f"\n| | Flint | llama-server |\n| --- | --- | --- |\n"
          f"| TTFT, {summary['load']['ttft_prompt_tokens']}-token prompt | {flint['ttft_long_prompt_s']:.2f} s "
          f"| {llama['ttft_long_prompt_s']:.2f} s |")
    print(f"| healthy after, cold (empty compilation cache) | {summary['flint_cold_start_s']:.1f} s | |\n"
          f"| healthy after, warm (last round) | {flint['healthy_after_s']:.1f} s "
          f"| {llama['healthy_after_s']:.1f} s |\n"
          f"| resident memory once healthy | {flint['rss_bytes'] / 2**20:.0f} MiB "
          f"| {llama['rss_bytes'] / 2**20:.0f} MiB |\n"
          f"| resident memory after the load | {flint['rss_after_load_bytes'] / 2**20:.0f} MiB "
          f"| {llama['rss_after_load_bytes'] / 2**20:.0f} MiB |")
