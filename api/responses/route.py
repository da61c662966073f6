"""The Responses API: POST /v1/responses (whole or streamed), and the stored responses'
retrieval, deletion and input items."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.params import FromPath

from api.core.errors import ApiError
from api.core.pipeline import Dialect, generate
from api.core.validation import parse_query
from api.responses import body, fields, plan, render
from api.responses.store import delete_response, input_items_page, stored_response
from generated.flint import (
    ListOrder,
    V1ResponsesResponseIdGetParametersQuery as RetrieveQuery,
    V1ResponsesResponseIdInputItemsGetParametersQuery as InputItemsQuery,
)

PATH = "/responses/{response_id:str}"
RESPONSES = Dialect(parse=body.parse, models=body.MODELS, registry=fields.REGISTRY, plan=plan.plan_response,
                    whole=render.whole, stream=render.stream, named_events=True)


@post("/responses", status_code=200)
async def create_response(request: Request, state: State) -> Response:
    return await generate(RESPONSES, request, state.server)


def refuse_include(request: Request, reason: str) -> None:
    """`include` (`include=...` or `include[]=...`) asks for extra data a stored object lacks."""
    if any(name.partition("[")[0] == "include" for name in request.query_params):
        raise ApiError(400, f"`include` is not supported here: {reason}", param="include")


@get(PATH)
async def retrieve_response(response_id: FromPath[str], request: Request, state: State) -> dict[str, Any]:
    refuse_include(request, "a stored response holds what its request included")
    parse_query(RetrieveQuery, request)
    return await stored_response(state.server, response_id)


@delete(PATH, status_code=200)
async def delete_stored_response(response_id: FromPath[str], state: State) -> dict[str, Any]:
    return await delete_response(state.server, response_id)


@get(PATH + "/input_items")
async def list_input_items(response_id: FromPath[str], request: Request, state: State) -> dict[str, Any]:
    refuse_include(request, "input items are listed as they were given")
    query = parse_query(InputItemsQuery, request)
    order = ListOrder(query.order or ListOrder.DESC).value  # the spec's default: newest first
    return await input_items_page(state.server, response_id, query.after, query.limit or 20, order)


HANDLERS = [create_response, retrieve_response, delete_stored_response, list_input_items]
