"""Field registry entries of POST /v1/completions: each field handled (with its proving
test) or refused (with the reason). See api/registry.py."""

from __future__ import annotations

from api.completions_body import OpenAILegacyFields
from api.registry import Refusal, register, register_like
from generated import fireworks_completions as fireworks
from generated import fireworks_streaming as streaming
from generated import friendli_container_completions as friendli
from generated import friendli_serverless_completions as serverless

BASIC = "tests/api/test_completions.py"
STREAM = "tests/api/test_completions_stream.py"
LOGPROBS = "tests/api/test_completions_logprobs.py"
SAMPLING = "tests/api/test_completions_sampling.py"
ERRORS = "tests/api/test_completions_errors.py"

LATER_ISSUE = "it belongs to a later issue"
SAMPLING_MAPPED = f"{SAMPLING}::test_sampling_fields_reach_the_engine"

# Fields both dialects share, with the same handling.
COMMON_HANDLED = {
    "model": f"{BASIC}::test_an_unknown_model_is_404",
    "n": f"{BASIC}::test_choice_index_is_prompt_index_times_n_plus_i",
    "stream": f"{STREAM}::test_stream_carries_the_same_text_as_the_response",
    "stop": f"{BASIC}::test_stop_strings_are_found_across_token_boundaries",
    "max_tokens": f"{BASIC}::test_max_tokens_bounds_the_output",
    "temperature": SAMPLING_MAPPED,
    "top_k": SAMPLING_MAPPED,
    "top_p": SAMPLING_MAPPED,
    "min_p": SAMPLING_MAPPED,
    "frequency_penalty": SAMPLING_MAPPED,
    "presence_penalty": SAMPLING_MAPPED,
    "repetition_penalty": SAMPLING_MAPPED,
    "seed": f"{BASIC}::test_a_seed_reproduces_choices_that_differ",
    "logprobs": f"{LOGPROBS}::test_integer_logprobs_give_the_legacy_format",
}

def _served_tier(value) -> bool:
    """Refuse tiers other than the default: there is no priority scheduling."""
    return value not in (None, "auto", "default")


register(fireworks.CompletionRequest, handled={
    **COMMON_HANDLED,
    "prompt": f"{BASIC}::test_every_prompt_form_is_one_prompt_each",
    "user": f"{BASIC}::test_tracing_fields_are_logged",
    "prompt_cache_key": f"{BASIC}::test_tracing_fields_are_logged",
    "metadata": f"{BASIC}::test_tracing_fields_are_logged",
    "raw_output": f"{BASIC}::test_raw_output_shows_what_the_model_saw",
    "perf_metrics_in_response": f"{BASIC}::test_perf_metrics_in_headers_and_body",
    "max_completion_tokens": f"{BASIC}::test_max_tokens_bounds_the_output",
    "typical_p": SAMPLING_MAPPED,
    "mirostat_target": SAMPLING_MAPPED,
    "mirostat_lr": SAMPLING_MAPPED,
    "top_logprobs": f"{LOGPROBS}::test_boolean_logprobs_give_the_content_format",
    "echo": f"{LOGPROBS}::test_echo_puts_prompt_logprobs_first",
    "echo_last": f"{LOGPROBS}::test_echo_last_echoes_the_prompt_suffix",
    "ignore_eos": SAMPLING_MAPPED,
    "context_length_exceeded_behavior": f"{BASIC}::test_context_length_exceeded_truncates_or_refuses",
    "logit_bias": f"{SAMPLING}::test_logit_bias_forces_a_token",
    "return_token_ids": f"{BASIC}::test_return_token_ids",
}, refused={
    "prompt_cache_isolation_key": "the prefix cache is shared by all requests and cannot be partitioned by key",
    "response_format": f"structured output {LATER_ISSUE}",
    "speculation": f"speculative decoding {LATER_ISSUE}",
    "prediction": f"predicted outputs (speculative decoding) {LATER_ISSUE}",
    "reasoning_effort": f"reasoning controls {LATER_ISSUE}",
    "reasoning_history": f"reasoning controls {LATER_ISSUE}",
    "thinking": f"reasoning controls {LATER_ISSUE}",
    "images": "this server serves text-only models",
    "service_tier": Refusal("only the default service tier is served", _served_tier),
})

FRIENDLI_HANDLED = {
    **COMMON_HANDLED,
    "bad_word_tokens": f"{SAMPLING}::test_bad_words_are_never_generated",
    "bad_words": f"{SAMPLING}::test_bad_words_are_never_generated",
    "eos_token": f"{SAMPLING}::test_stop_tokens_end_generation",
    "stop_tokens": f"{SAMPLING}::test_stop_tokens_end_generation",
    "forced_output_tokens": f"{SAMPLING}::test_forced_output_tokens_come_first",
    "max_total_tokens": f"{SAMPLING}::test_total_token_bounds",
    "min_total_tokens": f"{SAMPLING}::test_total_token_bounds",
    "min_tokens": SAMPLING_MAPPED,
    "no_repeat_ngram": SAMPLING_MAPPED,
    "xtc_threshold": SAMPLING_MAPPED,
    "xtc_probability": SAMPLING_MAPPED,
    "stream_options": f"{STREAM}::test_include_usage_adds_a_final_usage_chunk",
}
FRIENDLI_REFUSED = {
    "response_format": f"structured output {LATER_ISSUE}",
    "embedding_to_replace": "embedding replacement is not supported",
    "token_index_to_replace": "embedding replacement is not supported",
    "encoder_no_repeat_ngram": "only for encoder-decoder models; this server serves decoder-only models",
    "encoder_repetition_penalty": "only for encoder-decoder models; this server serves decoder-only models",
}
register(friendli.CompletionsBodyWithPrompt, refused=FRIENDLI_REFUSED, handled={
    **FRIENDLI_HANDLED, "prompt": f"{BASIC}::test_every_prompt_form_is_one_prompt_each"})
register(friendli.CompletionsBodyWithTokens, refused=FRIENDLI_REFUSED, handled={
    **FRIENDLI_HANDLED, "tokens": f"{BASIC}::test_every_prompt_form_is_one_prompt_each"})
register(friendli.StreamOptions, handled={"include_usage": f"{STREAM}::test_include_usage_adds_a_final_usage_chunk"})
register(friendli.TokenSequence, handled={"tokens": f"{SAMPLING}::test_stop_tokens_end_generation"})


def _not_default(default):
    return lambda value: value is not None and value != default


BEAM_SEARCH = "beam search is not supported"
register(serverless.ServerlessCompletionsExtensionRequest, handled={
    "timeout": f"{BASIC}::test_a_timeout_while_queued_is_429",
    "include_output_logprobs": f"{LOGPROBS}::test_include_output_logprobs_gives_token_logprobs",
}, refused={
    "num_beams": BEAM_SEARCH,
    # Without num_beams these are no-ops at their defaults; other values ask for beam search.
    "length_penalty": Refusal(BEAM_SEARCH, _not_default(1.0)),
    "early_stopping": Refusal(BEAM_SEARCH, _not_default(False)),
    "beam_search_type": Refusal(BEAM_SEARCH, _not_default("DETERMINISTIC")),
    "include_output_logits": Refusal("returning logits is not supported; ask for logprobs", bool),
})

register(OpenAILegacyFields, handled={}, refused={
    "best_of": Refusal("only best_of 1 is served", _not_default(1)),
    "suffix": Refusal("insertion (suffix) is not supported", lambda value: value is not None),
})

# The AsyncAPI message of a streamed completion is a subset of the Fireworks body, served
# by the same route with the same handling.
register_like(streaming.CompletionRequest, fireworks.CompletionRequest)
