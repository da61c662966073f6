"""The chat routes: POST /v1/chat/completions (a conversation in, the assistant's reply out,
whole or streamed), and the stored chat completions (`store: true`): list, retrieve,
update metadata, delete, and list a completion's request messages. Unknown ids are 404s in
OpenAI's error shape."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.params import FromPath

from api.chat import body, fields, plan, render
from api.chat.store import stored_view
from api.core.errors import ApiError
from api.core.pipeline import Dialect, generate
from api.core.validation import parse_body, parse_query, read_json_body, require_object
from api.core.state import ServerState
from api.core.store import Page, StoredChatCompletion, UnknownCursorError
from generated.openai_chat_completions import (
    ChatCompletionList,
    ChatCompletionMessageList,
    UpdateChatCompletionRequest,
    V1ChatCompletionsCompletionIdMessagesGetParametersQuery as MessagesQuery,
    V1ChatCompletionsGetParametersQuery as ListQuery,
)

PATH = "/chat/completions/{completion_id:str}"
CHAT = Dialect(parse=body.parse, models=body.MODELS, registry=fields.REGISTRY, plan=plan.plan_chat,
               whole=render.whole, stream=render.stream, error_event=lambda error: error.body)


@post("/chat/completions", status_code=200)
async def create_chat_completion(request: Request, state: State) -> Response:
    return await generate(CHAT, request, state.server)


def not_found(completion_id: str) -> ApiError:
    return ApiError(404, f"No stored chat completion found with id `{completion_id}`.",
                    param="completion_id", code="not_found")


def unknown_cursor(after: str) -> ApiError:
    return ApiError(400, f"`after` names no item of this list: `{after}`", param="after")


def page_body(list_cls: type[ChatCompletionList | ChatCompletionMessageList], items: list[dict[str, Any]],
              has_more: bool) -> dict[str, Any]:
    """A list object, checked against its schema. The schema's ids are strings, so an
    empty page has "" for `first_id` and `last_id`."""
    page = list_cls(object="list", data=items, first_id=items[0]["id"] if items else "",
                    last_id=items[-1]["id"] if items else "", has_more=has_more)
    return page.model_dump(mode="json", exclude_unset=True)


def order_of(query: ListQuery | MessagesQuery) -> str:
    return str(query.order or "asc")  # a SortOrder (a StrEnum), or the default's plain string


async def stored_or_404(server: ServerState, completion_id: str) -> StoredChatCompletion:
    stored = await server.store.get_chat_completion(completion_id)
    if stored is None:
        raise not_found(completion_id)
    return stored


@get("/chat/completions")
async def list_chat_completions(request: Request, state: State) -> dict[str, Any]:
    query = parse_query(ListQuery, request)
    metadata = query.metadata.root if query.metadata is not None else None
    try:
        page: Page[StoredChatCompletion] = await state.server.store.list_chat_completions(
            model=query.model, metadata=metadata, after=query.after, limit=query.limit or 20,
            order=order_of(query))
    except UnknownCursorError:
        raise unknown_cursor(query.after) from None
    return page_body(ChatCompletionList, [stored_view(stored) for stored in page.items], page.has_more)


@get(PATH)
async def retrieve_chat_completion(completion_id: FromPath[str], state: State) -> dict[str, Any]:
    return stored_view(await stored_or_404(state.server, completion_id))


@post(PATH, status_code=200)
async def update_chat_completion(completion_id: FromPath[str], request: Request, state: State) -> dict[str, Any]:
    update = parse_body(UpdateChatCompletionRequest, require_object(await read_json_body(request)))
    fields.REGISTRY.refuse_within(update)
    metadata = update.metadata.root if update.metadata is not None else None
    stored = await state.server.store.update_chat_completion_metadata(completion_id, metadata)
    if stored is None:
        raise not_found(completion_id)
    return stored_view(stored)


@delete(PATH, status_code=200)
async def delete_chat_completion(completion_id: FromPath[str], state: State) -> dict[str, Any]:
    if not await state.server.store.delete_chat_completion(completion_id):
        raise not_found(completion_id)
    return {"id": completion_id, "object": "chat.completion.deleted", "deleted": True}


@get(PATH + "/messages")
async def list_chat_completion_messages(completion_id: FromPath[str], request: Request,
                                        state: State) -> dict[str, Any]:
    query = parse_query(MessagesQuery, request)
    try:
        page = await state.server.store.list_chat_completion_messages(
            completion_id, after=query.after, limit=query.limit or 20, order=order_of(query))
    except UnknownCursorError:
        raise unknown_cursor(query.after) from None
    if page is None:
        raise not_found(completion_id)
    return page_body(ChatCompletionMessageList, page.items, page.has_more)


HANDLERS = [create_chat_completion, list_chat_completions, retrieve_chat_completion, update_chat_completion,
            delete_chat_completion, list_chat_completion_messages]
