"""tools/profile_host.py: the engine's host cost per step by stage, on a model whose device
step costs next to nothing."""

from __future__ import annotations

import json

from tools import profile_host


def test_every_stage_is_timed_and_the_stages_add_up_to_the_step(tmp_path, capsys):
    out = tmp_path / "host.json"
    assert profile_host.main(["--sequences", "3", "--steps", "3", "--repeat", "2", "--json", str(out)]) == 0
    result, = json.loads(out.read_text())
    staged = result["staged"]
    for run in (result, staged):
        assert run["sequences"] == 3 and run["steps"] == 3
        assert run["tokens"] == 3 * 3 * 8  # every row, every step, a window of 8 decode steps
    stages = staged["ms_per_step"]
    assert set(stages) == set(profile_host.STAGES)
    # The engine's own methods were reached through the wrappers: each outer stage took time.
    assert all(stages[stage] > 0 for stage in ("launch", "collect", "output", "detokenize", "stops"))
    outer = sum(value for stage, value in stages.items() if stage not in profile_host.INSIDE)
    assert abs(outer - staged["total_ms_per_step"]) < 1e-6 and stages["other"] >= 0
    assert stages["detokenize"] + stages["stops"] <= stages["output"]
    printed = capsys.readouterr().out
    assert "| 3 |" in printed and "detokenize" in printed


def test_a_replayed_device_runs_the_program_once_and_the_engine_as_ever(monkeypatch):
    """--replay-device: the host's stages alone. Inside, the step program runs once (the first
    decode window, kept); every later window lands those results at once, through the whole engine."""
    engine = profile_host.tiny_engine(2, 8)
    for request in profile_host.requests(2, max_tokens=400):
        engine.add_request(request)
    while engine.scheduler.num_waiting or any(seq.num_output_tokens == 0 for seq in engine.scheduler.running):
        engine.step()
    launched = []
    launch = engine.runner._launch
    monkeypatch.setattr(engine.runner, "_launch", lambda *args: launched.append(args) or launch(*args))
    outputs = []
    with profile_host.replayed_device(engine.runner):
        for _ in range(4):
            outputs += engine.step()
    assert len(launched) == 1
    by_request = {}
    for output in outputs:
        by_request.setdefault(output.request_id, []).append(output.new_token_ids)
    for windows in by_request.values():
        assert len(windows) == 4 and all(len(tokens) == 8 for tokens in windows)
        assert all(tokens == windows[1] for tokens in windows[1:]), "the kept window's tokens land again"
    assert engine.runner._launch.__name__ == "<lambda>"  # the replay put the runner back
