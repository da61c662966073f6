"""tools/profile_host.py: the engine's host cost per step by stage, on a model whose device
step costs next to nothing."""

from __future__ import annotations

import json

from tools import profile_host


def test_every_stage_is_timed_and_the_stages_add_up_to_the_step(tmp_path, capsys):
    out = tmp_path / "host.json"
    assert profile_host.main(["--sequences", "3", "--steps", "3", "--json", str(out)]) == 0
    result, = json.loads(out.read_text())
    assert result["sequences"] == 3 and result["steps"] == 3
    assert result["tokens"] == 3 * 3 * 8  # every row, every step, a window of 8 decode steps
    stages = result["ms_per_step"]
    assert set(stages) == set(profile_host.STAGES)
    # The engine's own methods were reached through the wrappers: each outer stage took time.
    assert all(stages[stage] > 0 for stage in ("launch", "collect", "output", "detokenize", "stops"))
    outer = sum(value for stage, value in stages.items() if stage not in profile_host.INSIDE)
    assert abs(outer - result["total_ms_per_step"]) < 1e-6 and stages["other"] >= 0
    assert stages["detokenize"] + stages["stops"] <= stages["output"]
    printed = capsys.readouterr().out
    assert "| 3 |" in printed and "detokenize" in printed
