"""GET / (the chat page) and /ui/* (its scripts, styles and vendored libraries).

The page is static: it talks to the server through the same public API any client uses
(/v1/models, /v1/chat/completions streamed), with the API key the person enters. So the
page itself is open, like /health: it holds no data, and every API call it makes is
authenticated as any other. Its Content-Security-Policy allows nothing but this server,
so nothing it renders (a model's Markdown included) can load from or send to elsewhere."""

from __future__ import annotations

from pathlib import Path

from litestar import MediaType, Response, get
from litestar.datastructures import CacheControlHeader
from litestar.static_files import create_static_files_router

STATIC_DIR = Path(__file__).parent / "static"
CONTENT_SECURITY_POLICY = ("default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                           "frame-ancestors 'none'; form-action 'none'")
PAGE_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer"}


@get("/", sync_to_thread=False, include_in_schema=False)
def chat_page() -> Response[bytes]:
    # Read at each request: a few KB, and an edited page shows on reload while developing.
    return Response((STATIC_DIR / "index.html").read_bytes(), media_type=MediaType.HTML,
                    headers=PAGE_HEADERS)


# no-cache: the browser revalidates each file (a 304 when unchanged), so a server upgraded
# under an open page never pairs a new page with old scripts.
ASSETS = create_static_files_router("/ui", directories=[STATIC_DIR], name="ui",
                                    cache_control=CacheControlHeader(no_cache=True))
HANDLERS = [chat_page, ASSETS]
