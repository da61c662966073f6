"""tools/bench.py serve's figures, without running the benchmark: the summary its rounds make,
the report printed from it, the two PNGs drawn from it (their lines are the summary's
figures), drawing again from results.json, and `--plot` on the command line, which fails
before the run when matplotlib is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import tools.bench.cli as cli
import tools.bench.plot as bench_plot
import tools.bench.roofline as roofline
import tools.bench.serve as bench_serve
import tools.bench.serve_report as bench_serve_report

CONCURRENCY = [1, 8, 32]
FLINT_TPS, LLAMA_TPS = [102.5, 158.0, 189.75], [96.0, 150.25, 166.5]
FLINT_TTFT, LLAMA_TTFT = [0.18, 1.5, 1.86], [0.33, 2.32, 5.43]


def server(tokens_per_second: list[float], ttft_median: list[float]) -> dict:
    return {"tokens_per_second": tokens_per_second, "ttft_mean_s": [t + 0.1 for t in ttft_median],
            "ttft_median_s": ttft_median, "ttft_long_prompt_s": 1.85, "healthy_after_s": 9.6,
            "rss_bytes": 1385 << 20, "rss_after_load_bytes": 1762 << 20}


@pytest.fixture
def summary() -> dict:
    return {"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "setup": "model: SmolLM2; llama-server 0.5.0",
            "machine": "AMD EPYC 7763 x2", "date": "2026-11-27 10:00 UTC", "command": "python tools/bench.py serve",
            "load": {"prompt_tokens": 128, "output_tokens": 128, "temperature": 0.0, "requests_per_client": 2,
                     "rounds": 2, "ttft_prompt_tokens": 1000},
            "concurrency": CONCURRENCY, "flint_cold_start_s": 25.2,
            "servers": {"Flint": server(FLINT_TPS, FLINT_TTFT), "llama-server": server(LLAMA_TPS, LLAMA_TTFT)}}


def plotted(fig) -> dict[str, tuple[list[float], list[float]]]:
    [axes] = fig.axes
    return {line.get_label(): ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
            for line in axes.get_lines()}


@pytest.mark.parametrize(("draw", "flint", "llama", "ylabel", "annotation"), [
    (bench_plot.throughput_figure, FLINT_TPS, LLAMA_TPS, "output tokens per second, all clients", "190"),
    (bench_plot.ttft_figure, FLINT_TTFT, LLAMA_TTFT, "median time to first token (s)", "5.43"),
])
def test_each_figure_has_a_line_per_server_of_its_figures(summary, draw, flint, llama, ylabel, annotation):
    fig = draw(summary)
    assert plotted(fig) == {"Flint": (CONCURRENCY, flint), "llama-server": (CONCURRENCY, llama)}
    [axes] = fig.axes
    assert axes.get_ylabel() == ylabel
    assert axes.get_xlabel().startswith("concurrent clients")
    assert axes.get_xscale() == "log"  # 1, 8, 32: powers of two, evenly spaced by doublings
    assert list(axes.get_xticks()) == CONCURRENCY
    assert [t.get_text() for t in axes.get_xticklabels()] == ["1", "8", "32"]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["Flint", "llama-server"]
    assert annotation in [t.get_text() for t in axes.texts]  # each point's value written beside it
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in axes.get_title()
    assert "AMD EPYC 7763 x2; 2026-11-27 10:00 UTC" in axes.get_title()


def test_at_each_concurrency_the_higher_value_is_written_above_and_the_lower_below(summary):
    [axes] = bench_plot.ttft_figure(summary).axes
    offsets = {text.get_text(): text.xyann for text in axes.texts}
    assert offsets["5.43"][1] > 0 and offsets["1.86"][1] < 0  # llama-server's TTFT is the higher at 32
    assert offsets["0.33"][1] > 0 and offsets["0.18"][0] > 0  # near the x axis: to the right, not below
    [axes] = bench_plot.throughput_figure(summary).axes
    offsets = {text.get_text(): text.xyann for text in axes.texts}
    assert offsets["190"][1] > 0 and offsets["166"][1] < 0  # Flint's tok/s is the higher at 32


def test_concurrencies_other_than_powers_of_two_get_a_linear_axis(summary):
    summary["concurrency"] = [1, 10, 30]
    [axes] = bench_plot.throughput_figure(summary).axes
    assert axes.get_xscale() == "linear"
    assert [t.get_text() for t in axes.get_xticklabels()] == ["1", "10", "30"]


def assert_png(path: Path) -> None:
    from PIL import Image

    assert path.stat().st_size > 0
    with Image.open(path) as image:
        assert image.format == "PNG"
        assert image.width > 300 and image.height > 200
        image.verify()


def test_save_plots_writes_the_results_and_both_pngs(summary, tmp_path):
    directory = tmp_path / "docs" / "bench"  # made if absent
    paths = bench_plot.save_plots(summary, directory)
    assert paths == [directory / "results.json", directory / "throughput.png", directory / "ttft.png"]
    assert json.loads((directory / "results.json").read_text()) == summary
    assert_png(directory / "throughput.png")
    assert_png(directory / "ttft.png")


def test_the_pngs_are_drawn_again_from_results_json(summary, tmp_path):
    bench_plot.save_plots(summary, tmp_path)
    assert bench_plot.main([str(tmp_path / "results.json"), "--out", str(tmp_path / "again")]) == 0
    assert_png(tmp_path / "again" / "throughput.png")
    assert_png(tmp_path / "again" / "ttft.png")


def test_the_summary_holds_each_servers_best_round(monkeypatch):
    def run(tokens_per_second: float, ttfts: list[float]):
        return SimpleNamespace(tokens_per_second=tokens_per_second, ttfts=ttfts)

    # Round 1 has Flint's best throughput at 8 clients, round 2 its best TTFTs.
    flint = [{1: run(90.0, [0.2]), 8: run(160.0, [1.0, 3.0, 5.0]), "ttft": 2.0},
             {1: run(100.0, [0.3]), 8: run(150.0, [1.0, 2.0, 3.0]), "ttft": 1.8}]
    llama = [{1: run(95.0, [0.4]), 8: run(140.0, [2.0]), "ttft": 2.5},
             {1: run(97.0, [0.5]), 8: run(130.0, [2.5]), "ttft": 2.6}]
    args = SimpleNamespace(concurrency=[1, 8], prompt_tokens=128, output_tokens=128, temperature=0.0,
                           requests_per_client=2, rounds=2, ttft_prompt_tokens=1000)
    servers = {name: SimpleNamespace(healthy_after=1.0, rss_bytes=1 << 30, rss_after_load=2 << 30)
               for name in ("Flint", "llama-server")}
    monkeypatch.setattr(roofline, "cpu_name", lambda: "test cpu x2")
    summary = bench_serve_report.summarize(args, servers, {"Flint": flint, "llama-server": llama},
                                           model="m.gguf", setup="setup", cold_start=25.0)
    assert summary["concurrency"] == [1, 8]
    assert summary["machine"] == "test cpu x2"
    assert summary["servers"]["Flint"]["tokens_per_second"] == [100.0, 160.0]
    assert summary["servers"]["Flint"]["ttft_mean_s"] == [0.2, 2.0]
    assert summary["servers"]["Flint"]["ttft_median_s"] == [0.2, 2.0]
    assert summary["servers"]["Flint"]["ttft_long_prompt_s"] == 1.8
    assert summary["servers"]["llama-server"]["tokens_per_second"] == [97.0, 140.0]
    json.dumps(summary)  # results.json is this summary


def test_the_report_prints_the_summarys_figures(summary, capsys):
    bench_serve_report.print_report(summary)
    report = capsys.readouterr().out
    assert "| 32 | 189.8 | 166.5 | 1.14 | 1.96 / 1.86 s | 5.53 / 5.43 s |" in report
    assert "| TTFT, 1000-token prompt | 1.85 s | 1.85 s |" in report
    assert "| resident memory after the load | 1762 MiB | 1762 MiB |" in report


@pytest.fixture
def benchmark_runs(monkeypatch) -> list:
    """The arguments of each serve benchmark `cli.main` starts; none is run."""
    runs = []
    monkeypatch.setattr(bench_serve, "run_serve_benchmark", runs.append)
    return runs


def test_serve_accepts_plot(benchmark_runs, tmp_path):
    directory = tmp_path / "plots"
    assert cli.main(["serve", "--concurrency", "1", "32", "--rounds", "2", "--plot", str(directory)]) == 0
    [args] = benchmark_runs
    assert args.plot == directory
    assert args.concurrency == [1, 32]
    assert directory.is_dir()  # made before the run, so a bad path fails first


def test_a_serve_run_with_plot_ends_by_writing_its_results_and_figures(monkeypatch, tmp_path, capsys):
    """The whole of run_serve_benchmark, its servers and their loads replaced by fixed figures."""
    def turn(tokens_per_second: float):
        def measured(args, binary, scratch, source, tokens, round_index):
            figures = {n: SimpleNamespace(tokens_per_second=tokens_per_second * n, ttfts=[0.1 * n])
                       for n in args.concurrency}
            return {**figures, "ttft": 1.5}, SimpleNamespace(healthy_after=2.0, rss_bytes=1 << 30,
                                                             rss_after_load=2 << 30)
        return measured

    source = SimpleNamespace(format="gguf", path=tmp_path / "model.gguf", id="model")
    for name, fake in {"resolve_model": lambda model: source, "ordinary_tokens": lambda path: None,
                       "find_llama_server": lambda path: tmp_path / "llama-server",
                       "llama_server_version": lambda binary: "test",
                       "start_one": lambda *args: SimpleNamespace(healthy_after=20.0),
                       "flint_turn": turn(10.0), "llama_turn": turn(8.0)}.items():
        monkeypatch.setattr(bench_serve, name, fake)
    monkeypatch.setattr(bench_serve.signal, "signal", lambda *args: None)
    directory = tmp_path / "plots"
    assert cli.main(["serve", "--concurrency", "1", "8", "--rounds", "2", "--plot", str(directory)]) == 0
    saved = json.loads((directory / "results.json").read_text())
    assert saved["model"] == "model.gguf"
    assert saved["concurrency"] == [1, 8]
    assert saved["servers"]["Flint"]["tokens_per_second"] == [10.0, 80.0]
    assert saved["servers"]["llama-server"]["tokens_per_second"] == [8.0, 64.0]
    assert_png(directory / "throughput.png")
    assert_png(directory / "ttft.png")
    assert f"wrote {directory / 'ttft.png'}" in capsys.readouterr().out


def test_plot_without_matplotlib_fails_before_the_benchmark(benchmark_runs, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with pytest.raises(SystemExit) as failure:
        cli.main(["serve", "--plot", str(tmp_path)])
    assert str(failure.value) == bench_plot.MISSING_MATPLOTLIB
    assert "pip install" in str(failure.value)
    assert benchmark_runs == []


def test_serve_without_plot_needs_no_matplotlib(benchmark_runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli.main(["serve"]) == 0
    [args] = benchmark_runs
    assert args.plot is None
