"""Where work runs: on the event loop, or in a worker thread. A request's work that grows
with its body must never run on the loop, which serves every other client meanwhile."""

from __future__ import annotations

import asyncio
import functools
from typing import Any


def on_event_loop() -> bool:
    """Whether the caller runs on an event loop's thread (a worker thread runs none)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def watch_where_called(monkeypatch, owner: Any, name: str) -> list[bool]:
    """Wrap `owner.name` for the test: the list gets, per call, whether it ran on the loop."""
    calls, function = [], getattr(owner, name)

    @functools.wraps(function)
    def watched(*args, **kwargs):
        calls.append(on_event_loop())
        return function(*args, **kwargs)

    monkeypatch.setattr(owner, name, watched)
    return calls
