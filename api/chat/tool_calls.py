"""Tool calls in chat answers: `message.tool_calls` whole, `delta.tool_calls` streamed.

The answer's text is read by api/core/tool_parser.py. A choice that ends naturally with
calls finishes with "tool_calls" (the deprecated `functions` API: "function_call", and its
one call as `message.function_call`); one cut by max_tokens keeps "length", with the calls
as far as they were written, streamed or not alike.
"""

from __future__ import annotations

from api.chat.plan import ChatPlan
from api.core.tool_parser import ArgumentsDelta, CallStart, ContentDelta, ToolCallStream, answer_calls
from api.core.tools import ToolCall
from generated.openai_chat_completions import (
    ChatCompletionChunkDelta,
    ChatCompletionCustomToolCallInput,
    ChatCompletionFunctionCall,
    ChatCompletionFunctionCallDelta,
    ChatCompletionMessage,
    ChatCompletionMessageCustomToolCall,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageToolCall,
    ChatCompletionMessageToolCallChunk,
)


def answer_message(plan: ChatPlan, text: str, reason: str) -> tuple[ChatCompletionMessage, str]:
    """The assistant message of a finished choice, and its finish reason."""
    if plan.tools is None:
        return ChatCompletionMessage(role="assistant", content=text, refusal=None), reason
    content, calls = answer_calls(text, plan.tool_format)
    message = ChatCompletionMessage(role="assistant", content=content or None, refusal=None)
    if not calls:
        return message, reason
    if plan.tools.deprecated_functions:
        message.function_call = ChatCompletionFunctionCall(name=calls[0].name, arguments=calls[0].arguments)
        return message, called(reason, "function_call")
    message.tool_calls = [message_call(call) for call in calls]
    return message, called(reason, "tool_calls")


def called(reason: str, call_reason: str) -> str:
    return call_reason if reason == "stop" else reason


def message_call(call: ToolCall) -> ChatCompletionMessageToolCall:
    if call.custom:
        return ChatCompletionMessageToolCall(ChatCompletionMessageCustomToolCall(
            id=call.id, type="custom", custom=ChatCompletionCustomToolCallInput(name=call.name, input=call.arguments)))
    return ChatCompletionMessageToolCall(ChatCompletionMessageFunctionToolCall(
        id=call.id, type="function", function=ChatCompletionFunctionCall(name=call.name, arguments=call.arguments)))


class ToolDeltas:
    """One streamed choice's text as content and tool-call deltas."""

    def __init__(self, plan: ChatPlan) -> None:
        self.deprecated = plan.tools.deprecated_functions
        self.stream = ToolCallStream(plan.tool_format)

    @property
    def called(self) -> bool:
        return bool(self.stream.calls)

    def feed(self, text: str, final: bool) -> list[ChatCompletionChunkDelta]:
        return [self.delta(item) for item in self.stream.feed(text, final)]

    def delta(self, item: ContentDelta | CallStart | ArgumentsDelta) -> ChatCompletionChunkDelta:
        if isinstance(item, ContentDelta):
            return ChatCompletionChunkDelta(content=item.text)
        if isinstance(item, CallStart):
            function = ChatCompletionFunctionCallDelta(name=item.call.name, arguments="")
            if self.deprecated:
                return ChatCompletionChunkDelta(function_call=function)
            return ChatCompletionChunkDelta(tool_calls=[ChatCompletionMessageToolCallChunk(
                index=item.index, id=item.call.id, type="function", function=function)])
        function = ChatCompletionFunctionCallDelta(arguments=item.text)
        if self.deprecated:
            return ChatCompletionChunkDelta(function_call=function)
        return ChatCompletionChunkDelta(tool_calls=[ChatCompletionMessageToolCallChunk(index=item.index,
                                                                                       function=function)])

    def finish_reason(self, reason: str) -> str:
        return called(reason, "function_call" if self.deprecated else "tool_calls") if self.called else reason
