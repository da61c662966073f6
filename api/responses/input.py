"""Responses API input: conversation items as stored, and as chat messages for the template.

`input` is a string (one user message) or a list of items. Each item is kept as the client
gave it, with an `id` (and `status`) filled in when missing and a message's string content
written as one text part, which is the shape GET /v1/responses/{id}/input_items lists.

For the prompt, items become chat messages (api/core/prompt.py renders them): a message
keeps its role and its text parts joined; an earlier answer's output_text and refusal parts
count as the assistant's text; a `function_call` (a call the model made earlier) joins the
assistant message before it as one of its `tool_calls` (consecutive calls make one
assistant message), and a `function_call_output` becomes a `tool` message whose
`tool_call_id` is the item's `call_id` (api/core/tool_prompt.py renders both). A `reasoning`
item (an earlier answer's thinking: its `reasoning_text` parts, or its summary when it has
none) is the `reasoning_content` of the assistant message that follows it, which it must
have. Image and file parts are refused (text-only model).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from api.core.prompt import PART_SEPARATOR
from api.core.errors import ApiError
from generated.flint import CreateResponseRequest

Item = dict[str, Any]
TEXT_PART_FIELDS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
NON_TEXT_PARTS = {"input_image": "image", "input_file": "file"}
# The prefix of the ids this server gives items, by item type (as OpenAI's ids read).
ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
FILLED_IN = ("type", "id", "status")  # an item's fields this server fills in when the client leaves them out


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def request_items(request: CreateResponseRequest) -> list[Item]:
    """The request's input as stored items (see the module docstring)."""
    given = request.input
    if isinstance(given, str):
        return [stored_item({"role": "user", "content": given})]
    return [stored_item(item.model_dump(mode="json", by_alias=True, exclude_unset=True)) for item in given]


def stored_item(item: Mapping[str, Any]) -> Item:
    """`item` with its type, id and status filled in, and string content as one text part."""
    # The generated models accept an explicit null for any optional field: null is missing.
    stored = {"type": "message", **{key: value for key, value in item.items()
                                   if not (key in FILLED_IN and value is None)}}
    stored.setdefault("id", new_id(ID_PREFIXES[stored["type"]]))
    stored.setdefault("status", "completed")
    if stored["type"] == "message" and isinstance(stored["content"], str):
        part_type = "output_text" if stored["role"] == "assistant" else "input_text"
        stored["content"] = [text_part(part_type, stored["content"])]
    return stored


def text_part(part_type: str, text: str) -> dict[str, Any]:
    if part_type == "output_text":
        return {"type": "output_text", "text": text, "annotations": []}
    return {"type": part_type, "text": text}


def chat_messages(instructions: str | None, history: Sequence[Item], items: Sequence[Item]) -> list[Item]:
    """The chat messages of a prompt: instructions first (as a developer message, which a
    template without that role reads as system), then the earlier turns, then this input."""
    messages = [{"role": "developer", "content": instructions}] if instructions else []
    reasoning: tuple[str, int | None] | None = None  # a reasoning item's text, waiting for its message
    for item, index in [*((item, None) for item in history), *((item, i) for i, item in enumerate(items))]:
        if reasoning is not None and not answers(item):
            raise reasoning_without_answer(reasoning[1])
        if item["type"] == "reasoning":
            reasoning = (reasoning_text(item), index)
            continue
        if item["type"] == "function_call":
            add_call(messages, item)
        else:
            messages.append(item_message(item, index))
        if reasoning is not None:
            messages[-1]["reasoning_content"] = reasoning[0]
            reasoning = None
    if reasoning is not None:
        raise reasoning_without_answer(reasoning[1])
    return messages


def answers(item: Mapping[str, Any]) -> bool:
    """Whether `item` is an assistant's output, which a reasoning item may precede."""
    return item["type"] == "function_call" or (item["type"] == "message" and item.get("role") == "assistant")


def reasoning_text(item: Mapping[str, Any]) -> str:
    """A reasoning item's text: its reasoning_text parts, else its summary."""
    parts = item.get("content") or item.get("summary") or []
    return PART_SEPARATOR.join(part["text"] for part in parts)


def reasoning_without_answer(index: int | None) -> ApiError:
    where = f"input.[{index}]" if index is not None else "previous_response_id"
    return ApiError(400, f"the reasoning item at `{where}` must be followed by the assistant message or function "
                         "call it reasoned toward", param=where)


def add_call(messages: list[Item], item: Mapping[str, Any]) -> None:
    """A function_call item as one of the `tool_calls` of the assistant message before it
    (a new one unless the last message is the assistant's)."""
    call = {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]}}
    if not messages or messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": None})
    last = messages[-1]
    last["tool_calls"] = [*last.get("tool_calls", []), call]


def item_message(item: Mapping[str, Any], index: int | None) -> Item:
    """One item as a chat message; `index`: its place in this request's input, for errors."""
    if item["type"] == "function_call_output":
        return {"role": "tool", "content": content_text(item["output"], index, "output"),
                "tool_call_id": item["call_id"]}
    return {"role": item["role"], "content": content_text(item["content"], index, "content")}


def content_text(content: str | Sequence[Mapping[str, Any]], index: int | None, field: str) -> str:
    """The text of a message's content, its parts' texts joined by newlines."""
    if isinstance(content, str):
        return content
    return PART_SEPARATOR.join(part_text(part, index, field, j) for j, part in enumerate(content))


def part_text(part: Mapping[str, Any], index: int | None, field: str, part_index: int) -> str:
    text_field = TEXT_PART_FIELDS.get(part["type"])
    if text_field is not None:
        return part[text_field]
    kind = NON_TEXT_PARTS.get(part["type"], "non-text")
    raise ApiError(400, f"input[{index}].{field}[{part_index}] is an `{part['type']}` part, but this "
                        f"model is text-only: it cannot take {kind} input",
                   param=f"input.[{index}].{field}.[{part_index}]", code="unsupported_content_part")
