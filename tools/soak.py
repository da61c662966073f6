"""A bounded mixed load against a live Flint server, and the checks that it came through:
`python tools/soak.py URL [--requests N] [--concurrency N]` (tools/soak/run.py says what it
sends and checks)."""

import sys
from pathlib import Path

# Run by its path: the repository root on sys.path, for tools.soak.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.soak.run import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
