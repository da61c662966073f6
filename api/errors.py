"""Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException

from api.validation import RequestValidationError
from generated.flint import ErrorDetail, ErrorResponse


class ApiError(Exception):
    """A request the server refuses, with the HTTP status and the field to blame."""

    def __init__(self, status_code: int, message: str, *, param: str | None = None,
                 error_type: str = "invalid_request_error", code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.headers = headers or {}  # e.g. Retry-After on a 429 or 503
        self.body = ErrorResponse(
            error=ErrorDetail(message=message, type=error_type, param=param, code=code)
        )


def model_not_found(model_id: str) -> ApiError:
    return ApiError(404, f"The model `{model_id}` does not exist.", param="model",
                    code="model_not_found")


def handle_api_error(_: Request, error: ApiError) -> Response:
    return Response(error.body.model_dump(mode="json"), status_code=error.status_code,
                    headers=error.headers)


def handle_validation_error(_: Request, error: RequestValidationError) -> Response:
    """Schema violations: 422 in the HTTPValidationError shape the specs give."""
    return Response(error.body.model_dump(mode="json", exclude_none=True), status_code=422)


def handle_http_exception(_: Request, error: HTTPException) -> Response:
    """Litestar's own errors (unknown route, wrong method) in the same shape."""
    error_type = "not_found_error" if isinstance(error, NotFoundException) else "invalid_request_error"
    body = ErrorResponse(error=ErrorDetail(message=error.detail, type=error_type, param=None, code=None))
    return Response(body.model_dump(mode="json"), status_code=error.status_code,
                    headers=error.headers)


EXCEPTION_HANDLERS = {ApiError: handle_api_error, RequestValidationError: handle_validation_error,
                      HTTPException: handle_http_exception}
