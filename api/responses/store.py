"""Stored responses: what a response keeps in the store, and reading it back.

A stored response holds the request as given (`request.body`), the conversation it
continued (`request.history`: its predecessors' input and output items, oldest first),
its own input items and the Response as returned. Keeping the resolved history with each
response means continuing it needs no walk up the chain, and survives the deletion of an
earlier response.
"""

from __future__ import annotations

from typing import Any

from api.core.errors import ApiError
from api.core.state import ServerState
from api.responses.input import Item
from api.core.store import Page, StoredResponse, UnknownCursorError


def response_not_found(response_id: str, param: str | None = None) -> ApiError:
    return ApiError(404, f"No response with id `{response_id}` is stored.", param=param,
                    error_type="invalid_request_error", code="response_not_found")


async def previous_response(server: ServerState, response_id: str | None) -> StoredResponse | None:
    """The stored response `previous_response_id` names (None when not given); 404 if unknown."""
    if response_id is None:
        return None
    stored = await server.store.get_response(response_id)
    if stored is None:
        raise response_not_found(response_id, param="previous_response_id")
    return stored


def conversation_of(stored: StoredResponse) -> list[Item]:
    """Every turn of a stored response's conversation: its history, input and output."""
    return [*stored.request.get("history", []), *stored.input_items, *stored.response["output"]]


async def save_response(server: ServerState, response: dict[str, Any], body: dict[str, Any],
                        history: list[Item], input_items: list[Item]) -> None:
    """Keep `response`, the request `body` it answers, the conversation it continued and its
    own input items; committed on return."""
    await server.store.save_response(
        response["id"], response["model"], response["created_at"],
        request={"body": body, "history": history}, input_items=input_items,
        response=response, metadata=response["metadata"] or None)


async def stored_response(server: ServerState, response_id: str) -> dict[str, Any]:
    stored = await server.store.get_response(response_id)
    if stored is None:
        raise response_not_found(response_id)
    return stored.response


async def delete_response(server: ServerState, response_id: str) -> dict[str, Any]:
    if not await server.store.delete_response(response_id):
        raise response_not_found(response_id)
    return {"id": response_id, "object": "response", "deleted": True}


async def input_items_page(server: ServerState, response_id: str, after: str | None, limit: int,
                           order: str) -> dict[str, Any]:
    """One page of a stored response's input items, as a ResponseItemList."""
    try:
        page: Page | None = await server.store.list_input_items(response_id, after=after, limit=limit, order=order)
    except UnknownCursorError:
        raise ApiError(400, f"`after` names no input item of response `{response_id}`: {after}",
                       param="after") from None
    if page is None:
        raise response_not_found(response_id)
    items = page.items
    return {"object": "list", "data": items, "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None, "has_more": page.has_more}
