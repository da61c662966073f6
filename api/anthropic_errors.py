"""Errors in Anthropic's shape, for the routes of the Anthropic dialect (/v1/messages):
`{"type": "error", "error": {"type": "invalid_request_error", "message": "..."}}`.

The route passes `ANTHROPIC_EXCEPTION_HANDLERS` as its own `exception_handlers`; Litestar
resolves handlers per route, so every error raised once the request is routed there (the
API key and serving guards, body size, validation, the handler itself) takes this shape,
with the same status codes and headers as elsewhere. The error type follows the status,
as Anthropic's API pairs them.

Schema violations are 400 invalid_request_error here rather than the OpenAI routes' 422:
Anthropic answers them with 400, and its SDK raises BadRequestError for them. The message
names the field first, as Anthropic's does: `max_tokens: Field required`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from litestar import Request, Response
from litestar.exceptions import HTTPException

from api.errors import ApiError
from api.validation import RequestValidationError
from generated.flint import AnthropicError, AnthropicErrorResponse

log = logging.getLogger("flint")

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",  # starting or draining; Anthropic's own overload status is 529
    529: "overloaded_error",
}


def error_type(status_code: int) -> str:
    return ERROR_TYPES.get(status_code, "api_error" if status_code >= 500 else "invalid_request_error")


def anthropic_error(status_code: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    error = AnthropicError(type=error_type(status_code), message=message)
    body = AnthropicErrorResponse(type="error", error=error)
    return Response(body.model_dump(mode="json", exclude_none=True), status_code=status_code,
                    headers=dict(headers or {}))


def handle_api_error(_: Request, error: ApiError) -> Response:
    return anthropic_error(error.status_code, error.body.error.message, error.headers)


def handle_validation_error(_: Request, error: RequestValidationError) -> Response:
    problems = [f"{'.'.join(map(str, detail.loc[1:])) or 'body'}: {detail.msg}" for detail in error.body.detail]
    return anthropic_error(400, "; ".join(problems))


def handle_http_exception(_: Request, error: HTTPException) -> Response:
    """Litestar's own errors on these routes (a body over the size limit, ...)."""
    return anthropic_error(error.status_code, error.detail, error.headers)


def handle_unexpected(_: Request, error: Exception) -> Response:
    log.exception("unexpected error", exc_info=error)
    return anthropic_error(500, "The server had an internal error while handling the request.")


ANTHROPIC_EXCEPTION_HANDLERS = {
    ApiError: handle_api_error,
    RequestValidationError: handle_validation_error,
    HTTPException: handle_http_exception,
    Exception: handle_unexpected,
}
