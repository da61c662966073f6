"""The refusals every dialect shares: one rule and one wording per unserved feature.

A value that asks for nothing this server would do differently (no reasoning, say) is
accepted by every dialect that has the field; any other value is refused, with the same
reason wherever the feature is asked for. Reasoning is served by every dialect
(api/core/reasoning.py), which refuses it with NOT_REASONING for a model that does not reason.
"""

from __future__ import annotations

from typing import Any

from api.core.registry import Refused

NOT_REASONING = "the served model does not reason"
TEXT_ONLY = "the served model is text-only"


def kind(value: Any) -> Any:
    """A value's `type` when it is a tagged object (a model, a RootModel or a dict), the
    value itself otherwise (a string, an enum member as its value)."""
    value = getattr(value, "root", value)
    if isinstance(value, dict):
        return value.get("type")
    return getattr(value, "type", getattr(value, "value", value))


def plain(value: Any) -> Any:
    """A value as JSON data: RootModels unwrapped, enum members as their values, lists too."""
    value = getattr(value, "root", value)
    if isinstance(value, list):
        return [plain(item) for item in value]
    return getattr(value, "value", value)


def refused_unless(reason: str, *accepted: Any) -> Refused:
    """Refused for every given value but the accepted ones (compared as plain data or by
    their `type`), which ask for nothing."""
    def applies(value: Any) -> bool:
        return value is not None and plain(value) not in accepted and kind(value) not in accepted
    return Refused(reason, applies)


def refused_if_any(reason: str) -> Refused:
    """Refused when non-empty: an empty list or object asks for nothing."""
    return Refused(reason, lambda value: bool(plain(value)))

