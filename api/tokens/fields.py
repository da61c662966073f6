"""The field registry of the tokenizer routes (api/core/registry.py): vLLM's request shapes."""

from __future__ import annotations

from api.core.registry import ModelFields, Planned, Registry
from generated.flint import ChatTemplateMessage, DetokenizeRequest, TokenizeChatRequest, TokenizeCompletionRequest

TESTS = "tests/api/test_tokens.py::"
MODEL = Planned("api.tokens.route.tokenize_prompt", TESTS + "test_another_model_is_404")
STRS = Planned("body.token_strs", TESTS + "test_token_strs_are_vocabulary_pieces")

REGISTRY = Registry([
    ModelFields(TokenizeCompletionRequest, {
        "model": MODEL,
        "prompt": Planned("body.tokenize", TESTS + "test_prompt_tokens_match_the_tokenizer"),
        "add_special_tokens": Planned("body.tokenize", TESTS + "test_add_special_tokens_adds_bos"),
        "return_token_strs": STRS,
    }),
    ModelFields(TokenizeChatRequest, {
        "model": MODEL,
        "messages": Planned("body.chat_ids", TESTS + "test_chat_tokens_match_the_rendered_template"),
        "add_generation_prompt": Planned("body.chat_ids", TESTS + "test_chat_without_generation_prompt"),
        "continue_final_message": Planned("body.chat_ids", TESTS + "test_continue_final_message_leaves_the_turn_open"),
        "add_special_tokens": Planned("body.chat_ids", TESTS + "test_chat_add_special_tokens_adds_bos"),
        "chat_template_kwargs": Planned("body.template_variables", TESTS + "test_chat_template_kwargs_reach_the_template"),
        "return_token_strs": STRS,
    }),
    ModelFields(ChatTemplateMessage, {
        "role": Planned("body.chat_ids", TESTS + "test_chat_tokens_match_the_rendered_template"),
        "content": Planned("body.chat_ids", TESTS + "test_chat_content_parts_become_text"),
    }),
    ModelFields(DetokenizeRequest, {
        "model": MODEL,
        "tokens": Planned("api.tokens.route.detokenize", TESTS + "test_detokenize_round_trips"),
    }),
])
