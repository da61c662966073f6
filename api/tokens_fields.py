"""Field registry entries for /v1/tokenize and /v1/detokenize (vLLM's request shapes)."""

from __future__ import annotations

import pydantic

from api.registry import refuse_unsupported, register
from generated.flint import ChatTemplateMessage, DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest

TESTS = "tests/api/test_tokens.py::"

register(TokenizeCompletionRequest, handled={
    "model": TESTS + "test_another_model_is_404",
    "prompt": TESTS + "test_prompt_tokens_match_the_tokenizer",
    "add_special_tokens": TESTS + "test_add_special_tokens_adds_bos",
    "return_token_strs": TESTS + "test_token_strs_are_each_tokens_text",
})
register(TokenizeChatRequest, handled={
    "model": TESTS + "test_another_model_is_404",
    "messages": TESTS + "test_chat_tokens_match_the_rendered_template",
    "add_generation_prompt": TESTS + "test_chat_without_generation_prompt",
    "continue_final_message": TESTS + "test_continue_final_message_leaves_the_turn_open",
    "add_special_tokens": TESTS + "test_chat_add_special_tokens_adds_bos",
    "chat_template_kwargs": TESTS + "test_chat_template_kwargs_reach_the_template",
    "return_token_strs": TESTS + "test_token_strs_are_each_tokens_text",
})
register(ChatTemplateMessage, handled={
    "role": TESTS + "test_chat_tokens_match_the_rendered_template",
    "content": TESTS + "test_chat_content_parts_become_text",
})
register(DetokenizeRequest, handled={
    "model": TESTS + "test_another_model_is_404",
    "tokens": TESTS + "test_detokenize_round_trips",
})


def refuse_unregistered(request: pydantic.BaseModel) -> None:
    """400 for a given field the registry does not list as handled (a field a spec change
    added, until someone decides on it)."""
    refuse_unsupported([type(request)], request.model_fields_set, dict(request))
