"""How `make test` shares the suite between its pytest-xdist workers.

Each group of tests runs whole in one worker, so that the session fixtures a group shares
are built once, not once per worker:
- every module of tests/api: their session-scoped tiny apps (tests/api/conftest.py);
- every module that uses the live SmolLM2 server (tests/e2e/conftest.py);
- any other module on its own, as with `--dist loadfile`, so that its module-scoped
  engines compile once.

xdist's own `--dist loadgroup` reads `xdist_group` marks into the test ids, which pytest
9.2's ids no longer allow: every test was sent on its own, and both workers built the live
server and the SmolLM2 engines. So the groups are this module's scheduler's scopes, worked
out from the test ids alone, as the controller sees them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

ROOT = Path(__file__).resolve().parent.parent
API_GROUP = "api-apps"
LIVE_GROUP = "live-smollm2"
# The two large groups go first, one to each worker, so that no worker is left with one of
# them at the end while the other idles.
FIRST_GROUPS = (API_GROUP, LIVE_GROUP)
# tests/e2e/conftest.py's fixtures that start the live server.
LIVE_FIXTURES = frozenset({"live", "live_server", "live_state", "sdk"})


def group_of(module: str) -> str:
    """The group of a test module, by its rootdir-relative path (tests/e2e/test_x.py)."""
    if module.startswith("tests/api/"):
        return API_GROUP
    if module in live_modules():
        return LIVE_GROUP
    return module


def first_groups_first(module: str) -> int:
    """A sort key: the large groups' modules first, in FIRST_GROUPS' order."""
    group = group_of(module)
    return FIRST_GROUPS.index(group) if group in FIRST_GROUPS else len(FIRST_GROUPS)


@functools.cache
def live_modules() -> frozenset[str]:
    """The e2e modules with a test or fixture that takes one of the live server's fixtures."""
    found = set()
    for path in sorted((ROOT / "tests" / "e2e").glob("test_*.py")):
        functions = (node for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
        if any(LIVE_FIXTURES & {argument.arg for argument in function.args.args} for function in functions):
            found.add(path.relative_to(ROOT).as_posix())
    return frozenset(found)


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling, with `group_of` as the scope of each test."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid.split("::", 1)[0])
