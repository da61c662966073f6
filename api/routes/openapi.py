"""GET /openapi.json: the contract this server serves (api/openapi/contract.py), open like /health."""

from __future__ import annotations

from litestar import Response, get

from api.openapi.contract import served_json


# In a worker thread: the first request reads spec/ and builds the document (about a second).
@get("/openapi.json", sync_to_thread=True)
def openapi_json() -> Response[bytes]:
    return Response(served_json(), media_type="application/json")
