"""Errors in Anthropic's shape, for the routes of the Anthropic dialect (/v1/messages):
`{"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}`.

The route passes `ANTHROPIC_ERRORS.handlers()` as its own `exception_handlers`; Litestar
resolves handlers per route, so every error raised once the request is routed there (the
API key and serving guards, body size, validation, the handler itself) takes this shape,
with the same status codes and headers as elsewhere. The error type follows the status,
as Anthropic's API pairs them.

Schema violations are 400 invalid_request_error, as Anthropic answers them (its SDK raises
BadRequestError for them). The message names the field first, as Anthropic's does:
`max_tokens: Field required`; so does any other 400 that blames a field, unless its message
names it already: "`tool_choice.name`: the tool choice names 'x', which is not among the tools".
"""

from __future__ import annotations

from typing import Any

from api.core.errors import ErrorShape, RequestValidationError
from generated.flint import AnthropicError, AnthropicErrorResponse

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",  # starting, draining or failed; Anthropic's own overload status is 529
    529: "overloaded_error",
}


def error_type(status_code: int) -> str:
    return ERROR_TYPES.get(status_code, "api_error" if status_code >= 500 else "invalid_request_error")


def anthropic_error(status_code: int, message: str, param: str | None = None, _type: str | None = None,
                    _code: str | None = None) -> dict[str, Any]:
    """Anthropic's error body; it has no field for the parameter, so a 400's message names
    it first (`tool_choice.name`: ...) unless it names it already."""
    if status_code == 400 and param and f"`{param}`" not in message:
        message = f"`{param}`: {message}"
    body = AnthropicErrorResponse(type="error", error=AnthropicError(type=error_type(status_code), message=message))
    return body.model_dump(mode="json", exclude_none=True)


def schema_error(error: RequestValidationError) -> dict[str, Any]:
    """Each violation as Anthropic words it: `messages.0.content: Field required`."""
    problems = [f"{'.'.join(map(str, e['loc'][1:])) or 'body'}: {e['msg']}" for e in error.errors]
    return anthropic_error(400, "; ".join(problems))


ANTHROPIC_ERRORS = ErrorShape(write=anthropic_error, schema_status=400, schema_body=schema_error)
