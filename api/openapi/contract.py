"""The contract Flint serves at GET /openapi.json: one OpenAPI 3.1 document of the routes
it serves, made from the spec/openapi documents that generated/ is made from, widened only
where Flint answers more than a spec allows (each place says why).

- Components: every spec document's, in one namespace; a name that documents define
  differently is renamed with the document's prefix (api/openapi/specs.py).
- Paths: flint.yaml's and the chat spec's as written (Flint serves each of their
  operations); /v1/completions and /serverless/v1/completions joined from the three
  completions documents as api/completions serves them (api/openapi/completions.py).
- /metrics (Prometheus text), /openapi.json itself and the chat page's files (/ and
  /ui/...), which no spec describes, are described here; all are small. /health is flint.yaml's.
- Errors: each operation also lists the error statuses Flint can answer that its spec
  leaves out, in the route's shape (api/openapi/errors.py).
- `/inference/v1`, the Fireworks base URL, serves the same routes as `/v1`, and is listed
  path by path (operation ids suffixed `AtInference`): a client or tool reading the
  document then finds every URL the server answers, and none it does not.
- Vendor `servers` and security requirements name the vendors' clouds; the document has
  Flint's own: the server itself (`/`), and its optional API key, as a bearer token or an
  `x-api-key` header (api/server/auth.py).
- Streams are Server-Sent Events; a `text/event-stream` schema describes the JSON in each
  event's `data:` line (a `data: [DONE]` line ends the OpenAI-style streams).

Litestar's own generated schema (at /schema) is switched off in create_app: it would
describe handlers that read raw bodies as taking none, and contradict this one.
"""

from __future__ import annotations

import copy
import functools
import json
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from api.openapi.completions import completions_paths
from api.openapi.errors import OPEN_PATHS, add_error_responses
from api.openapi.specs import Specs, load_specs, operations

SERVED_AS_WRITTEN = ("flint", "openai-chat-completions")  # documents whose every operation Flint serves
ALIAS = "/inference"  # /inference/v1/... serves what /v1/... does (api/server/app.py API_PREFIXES)
SECURITY_SCHEMES = {
    "BearerAuth": {"type": "http", "scheme": "bearer",
                   "description": "The server's API key (`--api-key`), when it was started with one."},
    "ApiKeyAuth": {"type": "apiKey", "in": "header", "name": "x-api-key",
                   "description": "The same key in Anthropic's header."},
}
HAND_WRITTEN_PATHS = {
    "/metrics": {"get": {
        "tags": ["health"], "operationId": "getMetrics", "summary": "Prometheus metrics",
        "responses": {"200": {"description": "The server's and engine's metrics, in Prometheus' text format.",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    "/": {"get": {
        "tags": ["page"], "operationId": "getChatPage", "summary": "The chat page",
        "description": "A chat with the served model in the browser (api/ui/), using this API like any client.",
        "responses": {"200": {"description": "The page.", "content": {"text/html": {"schema": {"type": "string"}}}}}}},
    "/ui/{file_path}": {"get": {
        "tags": ["page"], "operationId": "getChatPageFile", "summary": "A script, style or library of the chat page",
        "parameters": [{"name": "file_path", "in": "path", "required": True, "schema": {"type": "string"},
                        "description": "The file's path under the page's folder, slashes included."}],
        "responses": {"200": {"description": "The file.", "content": {"*/*": {"schema": {"type": "string"}}}}}}},
    "/openapi.json": {"get": {
        "tags": ["health"], "operationId": "getOpenAPI", "summary": "This document",
        "responses": {"200": {"description": "The OpenAPI 3.1 document of the routes this server serves.",
                              "content": {"application/json": {"schema": {"type": "object"}}}}}}},
}
DESCRIPTION = (
    "A self-hosted LLM inference server speaking the OpenAI (chat completions, responses), Fireworks and "
    "Friendli (completions) and Anthropic (messages) dialects, made from their specs. Every `/v1` route is "
    "also served under `/inference/v1`, the Fireworks base URL. Streaming answers are Server-Sent Events; "
    "a `text/event-stream` schema describes the JSON in each event's `data:` line.")


@functools.cache
def served_json() -> bytes:
    """The document as JSON bytes, made once per process (reading spec/ takes a moment)."""
    return json.dumps(openapi_document(), ensure_ascii=False).encode()


def openapi_document() -> dict[str, Any]:
    specs = load_specs()
    paths, schemas = completions_paths(specs)
    for stem in SERVED_AS_WRITTEN:
        paths |= {path: own_path_item(item) for path, item in specs.documents[stem]["paths"].items()}
    paths |= copy.deepcopy(HAND_WRITTEN_PATHS)
    for path in OPEN_PATHS:
        for _, operation in operations(paths[path]):
            operation["security"] = []  # no key needed, whatever the server was started with
    add_error_responses(paths, specs)
    paths |= aliased(paths)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Flint", "version": package_version(), "description": DESCRIPTION,
                 "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"}},
        "servers": [{"url": "/"}],
        "security": [{"BearerAuth": []}, {"ApiKeyAuth": []}, {}],  # {}: a server started without a key
        "paths": dict(sorted(paths.items())),
        "components": {**components(specs, schemas), "securitySchemes": SECURITY_SCHEMES},
    }


def own_path_item(item: dict[str, Any]) -> dict[str, Any]:
    """A spec's path item without the vendor's servers and security requirements."""
    item = {key: copy.deepcopy(value) for key, value in item.items() if key != "servers"}
    for _, operation in operations(item):
        operation.pop("security", None)
    return item


def aliased(paths: dict[str, Any]) -> dict[str, Any]:
    """The /v1 paths again under /inference/v1, with operation ids of their own."""
    aliases = {}
    for path, item in paths.items():
        if path.startswith("/v1/"):
            alias = copy.deepcopy(item)
            for _, operation in operations(alias):
                operation["operationId"] += "AtInference"
            aliases[ALIAS + path] = alias
    return aliases


def components(specs: Specs, schemas: dict[str, Any]) -> dict[str, Any]:
    """The specs' components and the ones this document makes, which must not reuse a name."""
    clashes = set(schemas) & set(specs.components["schemas"])
    if clashes:
        raise ValueError(f"schemas made for the contract reuse spec names: {sorted(clashes)}")
    return {**specs.components, "schemas": {**specs.components["schemas"], **schemas}}


def package_version() -> str:
    try:
        return version("flint")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0.0.0"
