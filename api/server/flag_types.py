"""Argument types the `flint` flags share."""

from __future__ import annotations

import argparse


def at_least(minimum: int, kind: type = int):
    """An argparse type: `kind` of the text, refused below `minimum` (and NaN)."""
    def parse(text: str):
        value = kind(text)
        if not value >= minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}")
        return value
    return parse
