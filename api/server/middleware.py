"""What every HTTP request gets, whatever answers it: an X-Request-Id on its answer, its id
on the log records made while it is served, and an access line once its answer has ended.

It wraps the whole Litestar ASGI handler (`wrap_app`), not a route: Litestar's own
middleware runs only for requests that reach a route, so an unknown path (404), a method a
path does not serve (405) and an answer from the app's exception handlers would go
unmarked. Guard refusals (401, 503) and SSE streams pass through it like any answer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from litestar import Litestar
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from api.server.logs import log_access
from api.server.request_id import HEADER, chosen_request_id, remember, serving


@dataclass
class Exchange:
    """One request's answer as it goes out: what the access line reports."""

    request_id: str
    started: float = field(default_factory=time.perf_counter)
    status: int | None = None  # None until the answer begins
    num_bytes: int = 0
    streamed: bool = False  # the body went out in more than one piece

    def observe(self, message: Message) -> Message:
        """Note `message`, and stamp the request id on the answer's headers."""
        if message["type"] == "http.response.start":
            self.status = message["status"]
            message["headers"] = [*message.get("headers", ()), (HEADER.encode(), self.request_id.encode())]
        elif message["type"] == "http.response.body":
            self.num_bytes += len(message.get("body", b""))
            self.streamed = self.streamed or message.get("more_body", False)
        return message


class RequestMiddleware:
    """ASGI middleware: see the module's docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id, made_here = chosen_request_id(scope["headers"])
        remember(scope, request_id, made_here)
        exchange = Exchange(request_id)

        async def send_observed(message: Message) -> None:
            await send(exchange.observe(message))

        with serving(request_id):
            try:
                await self.app(scope, receive, send_observed)
            finally:
                log_exchange(scope, exchange)


def log_exchange(scope: Scope, exchange: Exchange) -> None:
    client = scope.get("client")
    log_access(method=scope["method"], path=scope["path"], status=exchange.status,
               duration_ms=(time.perf_counter() - exchange.started) * 1000, request_id=exchange.request_id,
               client=f"{client[0]}:{client[1]}" if client else None, num_bytes=exchange.num_bytes,
               streamed=exchange.streamed)


def wrap_app(app: Litestar) -> Litestar:
    """`app` with every request passing through RequestMiddleware first."""
    app.asgi_handler = RequestMiddleware(app.asgi_handler)
    return app
