"""CORS for browser pages served from other origins (`--allowed-origins`; none by default).

A browser asks before a cross-origin API call that carries a key or a JSON body: an OPTIONS
"preflight" without credentials. Litestar answers it in its CORS layer, which runs before
routing and so before the API-key guard, as browsers require (the guard would answer 401,
and the browser would then refuse the real request). Requests from origins not listed get
no Access-Control-Allow-Origin, so the browser keeps their answers from the page."""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit

from litestar.config.cors import CORSConfig

from api.server.request_id import HEADER as REQUEST_ID_HEADER

ANY_ORIGIN = "*"


def parse_origin(text: str) -> str:
    """`text` as an origin (scheme://host[:port], as a browser's Origin header writes it), or
    "*"; raises argparse.ArgumentTypeError naming what is wrong."""
    if text == ANY_ORIGIN:
        return text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an origin: write scheme://host[:port], e.g. "
                                         "https://chat.example.com or http://localhost:5173, or * for any")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise argparse.ArgumentTypeError(f"{text!r} is not an origin: an origin has no path, query or user")
    return f"{parts.scheme}://{parts.netloc.lower()}"


def cors_config(allowed_origins: tuple[str, ...]) -> CORSConfig | None:
    """Litestar's CORS set-up for `allowed_origins`; None (no CORS headers at all) when empty."""
    if not allowed_origins:
        return None
    # Any method and request header: the preflight echoes the headers asked for, which is how
    # Authorization and x-api-key (never covered by a literal "*") get through. Keys travel in
    # headers, not cookies, so no credentials mode.
    return CORSConfig(allow_origins=list(allowed_origins), allow_methods=["*"], allow_headers=["*"],
                      expose_headers=[REQUEST_ID_HEADER, "Retry-After"], max_age=600)


def add_cors_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allowed-origins", metavar="ORIGIN", nargs="+", type=parse_origin, default=[],
                        help="origins whose browser pages may call the API (CORS), e.g. "
                             "https://chat.example.com; * for any (default: none, same-origin pages only, "
                             "such as the chat page at /)")
