"""The GPU check's record: gpu_check.json and the Markdown table gpu_check.md beside it.

    python3 -m tools.gpu.report DIR    fold DIR/steps.tsv (tools/gpu_check.sh's step results)
                                       and DIR/gpu_parity.json into DIR/gpu_check.json (the
                                       benchmark's, when it ran) and write both files again

The table has one row per figure: metric, value, target, device, date, command, so that a
row pasted into BENCHMARKS.md carries where and how it was measured.
"""

from __future__ import annotations

import datetime
import json
import platform
import sys
from pathlib import Path

JSON_NAME, MARKDOWN_NAME = "gpu_check.json", "gpu_check.md"
STEPS_NAME, PARITY_NAME, SERVE_NAME = "steps.tsv", "gpu_parity.json", "gpu_serve.json"


def new_record(command: str) -> dict:
    """An empty record for this machine, now."""
    import jax

    device = jax.devices()[0]
    return {"device": f"{device.device_kind} ({device.platform})", "jax": jax.__version__,
            "host": platform.node(), "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command, "metrics": {}, "labels": {}, "targets": {}}


def put(record: dict, key: str, value: float, label: str, target: str = "") -> None:
    """One figure: its value, what it is (with its unit), and the issue's target if any."""
    record["metrics"][key] = value
    record["labels"][key] = label
    record["targets"][key] = target


def write(out_dir: Path, record: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / JSON_NAME).write_text(json.dumps(record, indent=2) + "\n")
    (out_dir / MARKDOWN_NAME).write_text(markdown(record))


def number(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def code(command: str) -> str:
    """`command` as Markdown code inside a table cell (its pipes escaped)."""
    return "`" + command.replace("|", "\\|") + "`"


def markdown(record: dict) -> str:
    """The table; the step results, parity and the HTTP checks first, when tools/gpu_check.sh
    folded them in."""
    device, date = record.get("device", "?"), record.get("date", "?")
    lines = ["| metric | value | target | device | date | command |", "| --- | --- | --- | --- | --- | --- |"]
    for step in record.get("steps", []):
        lines.append(f"| step: {step['name']} | {step['status']} ({step['seconds']} s) | pass | {device} | {date} "
                     f"| {code(step['command'])} |")
    parity = record.get("parity")
    if parity:
        command = code("python3 -m tools.gpu.parity")
        lines.append(f"| parity: bf16 logits, relative L2 against CPU float32 | {parity['bf16_logits_rel_l2']:.2e} "
                     f"| < {parity['tolerance']} | {device} | {date} | {command} |")
        lines.append(f"| parity: greedy float32 tokens equal to the CPU's | {parity['greedy_tokens_equal']}/"
                     f"{parity['greedy_tokens_total']} | all | {device} | {date} | {command} |")
    serve = record.get("serve")
    if serve:
        for name, check in serve["checks"].items():
            lines.append(f"| serve ({serve['dtype']}): {name} | {'pass' if check['passed'] else 'FAIL'}: "
                         f"{check['detail'].replace('|', '/')[:120]} | pass | {device} | {date} "
                         f"| {code('python3 -m tools.gpu.serve')} |")
    for name, error in record.get("errors", {}).items():
        lines.append(f"| error in {name} | {error.replace('|', '/')[:200]} | none | {device} | {date} "
                     f"| {code(record.get('command', ''))} |")
    for key, value in record.get("metrics", {}).items():
        lines.append(f"| {record['labels'][key]} | {number(value)} | {record['targets'].get(key) or '—'} | {device} "
                     f"| {date} | {code(record.get('command', ''))} |")
    return "\n".join(lines) + "\n"


def read_steps(path: Path) -> list[dict]:
    """tools/gpu_check.sh's lines: name, status, seconds, command (tab-separated)."""
    if not path.exists():
        return []
    rows = [line.split("\t", 3) for line in path.read_text().splitlines() if line.strip()]
    return [{"name": name, "status": status, "seconds": seconds, "command": command}
            for name, status, seconds, command in rows]


def fold(out_dir: Path) -> dict:
    """The benchmark's record (or a bare one) with the steps, parity and HTTP results added."""
    path = out_dir / JSON_NAME
    record = json.loads(path.read_text()) if path.exists() else new_record("tools/gpu_check.sh")
    record["steps"] = read_steps(out_dir / STEPS_NAME)
    for key, name in (("parity", PARITY_NAME), ("serve", SERVE_NAME)):
        if (out_dir / name).exists():
            record[key] = json.loads((out_dir / name).read_text())
    record["passed"] = all(step["status"] == "pass" for step in record["steps"])
    return record


def main(argv: list[str]) -> int:
    out_dir = Path(argv[0])
    write(out_dir, fold(out_dir))
    print((out_dir / MARKDOWN_NAME).read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
