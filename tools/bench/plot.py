"""Figures of tools/bench.py serve: throughput and time to first token against concurrency,
Flint beside llama-server, drawn from the run's summary (tools/bench/serve_report.py).

    python tools/bench.py serve --plot DIR     runs the benchmark, then writes DIR/results.json,
                                               DIR/throughput.png and DIR/ttft.png
    python -m tools.bench.plot DIR/results.json [--out DIR]
                                               draws the figures again from a saved run

matplotlib (in the `bench` and `dev` extras) is imported only here, and only when drawing,
so the benchmark itself runs without it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = "results.json"
THROUGHPUT_PNG, TTFT_PNG = "throughput.png", "ttft.png"
MISSING_MATPLOTLIB = ("the plots (--plot) need matplotlib, which is not installed: .venv/bin/pip install -e '.[dev]' "
                      "(or .venv/bin/pip install 'matplotlib>=3.11.2')")


def require_matplotlib() -> None:
    """Fail now, with what to install, rather than after a benchmark of many minutes."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit(MISSING_MATPLOTLIB) from None


def throughput_figure(summary: dict):
    """Output tok/s of all clients together against the number of clients, one line per server."""
    return against_concurrency(summary, "tokens_per_second", "output tokens per second, all clients",
                               "Throughput against concurrency", "{:.0f}")


def ttft_figure(summary: dict):
    """Median time to first token under the load against the number of clients, one line per server."""
    return against_concurrency(summary, "ttft_median_s", "median time to first token (s)",
                               "Time to first token against concurrency", "{:.2f}")


def against_concurrency(summary: dict, figure: str, ylabel: str, title: str, value_format: str):
    """A Figure with one marked, annotated line per server, on the Agg canvas (no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.add_subplot()
    concurrency = summary["concurrency"]
    values = {name: figures[figure] for name, figures in summary["servers"].items()}
    top = 1.15 * max(max(v) for v in values.values())  # room above the highest point for its value
    axes.set_ylim(0, top)
    for name, own in values.items():
        [line] = axes.plot(concurrency, own, marker="o", label=name)
        for i, (x, y) in enumerate(zip(concurrency, own)):
            highest = y >= max(v[i] for v in values.values())
            axes.annotate(value_format.format(y), (x, y), textcoords="offset points", fontsize=8,
                          color=line.get_color(), **label_place(highest, y / top))
    label_concurrency_axis(axes, concurrency)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    axes.legend()
    fig.suptitle(title)
    axes.set_title(subtitle(summary), fontsize=8)
    return fig


def label_place(highest: bool, height: float) -> dict:
    """Where a point's value goes, so that the servers' values at one concurrency stay apart:
    the highest above its point, the others below theirs, or to the right of a point too near
    the x axis (`height`: the point's share of the y axis) for a label below it."""
    if highest:
        return {"xytext": (0, 7), "ha": "center"}
    if height < 0.1:
        return {"xytext": (7, -3), "ha": "left"}
    return {"xytext": (0, -13), "ha": "center"}


def label_concurrency_axis(axes, concurrency: list[int]) -> None:
    """A log2 axis when every concurrency is a power of two (1, 8, 32, 64 spaced evenly by
    doublings), linear otherwise; a tick at each measured concurrency, labelled plainly."""
    if all(n > 0 and n & (n - 1) == 0 for n in concurrency):
        axes.set_xscale("log", base=2)
    axes.set_xticks(concurrency, [str(n) for n in concurrency])
    axes.minorticks_off()
    axes.set_xlabel("concurrent clients (closed loop, streamed)")


def subtitle(summary: dict) -> str:
    load = summary["load"]
    return (f"{summary['model']}; {load['prompt_tokens']}-token prompts, {load['output_tokens']} output tokens, "
            f"best of {load['rounds']} rounds\n{summary['machine']}; {summary['date']}")


def save_figures(summary: dict, directory: Path) -> list[Path]:
    """Write each figure as a PNG in `directory`; the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for filename, draw in ((THROUGHPUT_PNG, throughput_figure), (TTFT_PNG, ttft_figure)):
        path = directory / filename
        draw(summary).savefig(path, dpi=120)
        paths.append(path)
    return paths


def save_plots(summary: dict, directory: Path) -> list[Path]:
    """results.json and the figures, so that the figures can be drawn again from the file."""
    directory.mkdir(parents=True, exist_ok=True)
    results = directory / RESULTS
    results.write_text(json.dumps(summary, indent=2) + "\n")
    return [results, *save_figures(summary, directory)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw tools/bench.py serve's figures again from its results.json")
    parser.add_argument("results", type=Path, help="a results.json written by `tools/bench.py serve --plot DIR`")
    parser.add_argument("--out", type=Path, default=None, help="where the PNGs go (default: beside the results)")
    args = parser.parse_args(argv)
    require_matplotlib()
    summary = json.loads(args.results.read_text())
    for path in save_figures(summary, args.out or args.results.parent):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
