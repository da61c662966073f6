"""The error answers the served contract lists for each operation (api/openapi/contract.py).

An operation keeps the error responses its spec gives it, and gets those Flint can answer
that its spec leaves out, in the shape its route answers (api/core/errors.py): OpenAI's
`{"error": {"message", "type", "param", "code"}}`; Anthropic's `{"type": "error",
"error": {"type", "message"}}` below /v1/messages (api/messages/errors.py); and on the
completions routes a schema violation is the Fireworks spec's 422 `{"detail": [...]}` with
OpenAI's `error` beside it. A status the spec covers already, itself or by a range such as
`4XX`, is left as the spec says, given the route's shape where the spec gives no body.

Which statuses an operation can answer follows from what it takes: every guarded route can
answer 401 (started with an API key) and 503 (starting, draining or failed); a body can be
malformed (400, or 422), too large (413) or name another model (404); a query can be
malformed (400); a path parameter can name nothing stored (404); and a generation can find
the queue full or wait past its `timeout` (429). A 500 is never listed: it is a bug.
"""

from __future__ import annotations

from typing import Any

from api.openapi.specs import Specs, operations

# Outside the API key and serving guards.
OPEN_PATHS = ("/health", "/metrics", "/openapi.json", "/", "/ui/{file_path}")
GENERATION_PATHS = ("/v1/completions", "/serverless/v1/completions", "/v1/chat/completions", "/v1/responses",
                    "/v1/messages")
ANTHROPIC_PATHS = ("/v1/messages", "/v1/messages/count_tokens")
COMPLETIONS_PATHS = ("/v1/completions", "/serverless/v1/completions")
WHY = {
    400: "The request is malformed, or asks for something this server refuses; the message names the field.",
    401: "The server was started with an API key, and the request did not carry it.",
    404: "The model named, or the stored object or file the path names, does not exist.",
    413: "The body is larger than the server accepts (`--max-body-bytes`).",
    422: "The body breaks the request schema: `detail` locates each violation, as Fireworks answers.",
    429: "The server is at capacity (retry after `Retry-After` seconds), or the request waited past its "
         "`timeout`.",
    503: "The server is starting, draining before shutdown, or its engine failed.",
}


def add_error_responses(paths: dict[str, Any], specs: Specs) -> None:
    """Each operation of `paths` given the error responses its spec leaves out."""
    for path, item in paths.items():
        for method, operation in operations(item):
            responses = operation["responses"]
            parameters = [*item.get("parameters", []), *operation.get("parameters", [])]
            for status in sorted(statuses(path, method, "requestBody" in operation, parameters, specs)):
                if not covered(responses, status):
                    responses[str(status)] = error_response(path, status, specs)
                elif str(status) in responses and responses[str(status)].keys() == {"description"}:
                    # The spec names the status but not its body (Friendli's 429): Flint's shape.
                    responses[str(status)]["content"] = error_response(path, status, specs)["content"]


def statuses(path: str, method: str, has_body: bool, parameters: list[dict[str, Any]], specs: Specs) -> set[int]:
    """The error statuses Flint can answer on this operation (the module docstring says why)."""
    places = {parameter_place(parameter, specs) for parameter in parameters}
    if path in OPEN_PATHS:  # no key and no engine needed: only a path naming nothing fails
        return {404} if "path" in places else set()
    found = {401, 503}
    if has_body:
        found |= {400, 404, 413} | ({422} if path in COMPLETIONS_PATHS else set())
    if "query" in places:
        found.add(400)
    if "path" in places:
        found.add(404)
    if method == "post" and path in GENERATION_PATHS:
        found.add(429)
    return found


def parameter_place(parameter: dict[str, Any], specs: Specs) -> str:
    if "$ref" in parameter:
        parameter = specs.components["parameters"][parameter["$ref"].rsplit("/", 1)[-1]]
    return parameter["in"]


def covered(responses: dict[str, Any], status: int) -> bool:
    return str(status) in responses or f"{str(status)[0]}XX" in responses


def error_response(path: str, status: int, specs: Specs) -> dict[str, Any]:
    """The error answer of `status` on `path`, in its route's shape."""
    if path in ANTHROPIC_PATHS:
        schema: dict[str, Any] = {"$ref": specs.ref("flint", "AnthropicErrorResponse")}
    elif status == 422:
        schema = {"allOf": [{"$ref": specs.ref("fireworks-completions", "HTTPValidationError")},
                            {"$ref": specs.ref("flint", "ErrorResponse")}]}
    else:
        schema = {"$ref": specs.ref("flint", "ErrorResponse")}
    return {"description": WHY[status], "content": {"application/json": {"schema": schema}}}
