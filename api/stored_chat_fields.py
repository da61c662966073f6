"""Field registry entries for POST /v1/chat/completions/{id} (updating a stored completion)."""

from __future__ import annotations

from api.registry import register
from generated.openai_chat_completions import UpdateChatCompletionRequest

register(UpdateChatCompletionRequest, handled={
    "metadata": "tests/api/test_store_chat.py::test_update_replaces_metadata_and_null_clears_it",
})
