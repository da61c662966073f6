"""Benchmarks: `python tools/bench.py COMMAND` (tools/bench/cli.py lists the commands).
Figures go to BENCHMARKS.md with the command, the machine and the date."""

import sys
from pathlib import Path

# Run by its path: the repository root on sys.path, for tools.bench and the engine.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
