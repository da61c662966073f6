"""The field registry of POST /v1/completions (api/core/registry.py): what handles each field
of the Fireworks and Friendli bodies the route merges (api/completions/body.py)."""

from __future__ import annotations

from api.completions.body import OpenAILegacyFields
from api.core import refusals
from api.core.registry import ModelFields, Planned, Refused, Registry, Sampled, Stopping
from generated import fireworks_completions as fireworks
from generated import flint
from generated import fireworks_streaming as streaming
from generated import friendli_container_completions as friendli
from generated import friendli_serverless_completions as serverless

BASIC = "tests/api/test_completions.py::"
STREAM = "tests/api/test_completions_stream.py::"
LOGPROBS = "tests/api/test_completions_logprobs.py::"
SAMPLING = "tests/api/test_completions_sampling.py::"
PIPELINE = "api.core.pipeline.generate"  # the model check and the choice of a stream
TENANCY = "tests/api/test_tenancy_http.py::"
TIER = Planned("api.core.tenancy.openai_ask", TENANCY + "test_a_priority_request_is_served_ahead_of_a_saturated_default_tier")
ISOLATION = Planned("api.core.tenancy.openai_ask", TENANCY + "test_isolation_keys_partition_the_prefix_cache")
SESSION = Planned("api.core.tenancy.openai_ask", TENANCY + "test_session_ids_keep_their_pages_and_move_the_metrics")

PROMPT = Planned("plan.prompt_token_ids", BASIC + "test_every_prompt_form_is_one_prompt_each")
MAX_TOKENS = Planned("plan.max_tokens_for", BASIC + "test_max_tokens_bounds_the_output")
TRACING = Planned("plan.log_tracing_fields", BASIC + "test_tracing_fields_are_logged")
LOGPROBS_COUNT = Planned("plan.logprobs_of", LOGPROBS + "test_integer_logprobs_give_the_legacy_format")
STOP_TOKENS = Planned("plan.stop_criteria", SAMPLING + "test_stop_tokens_end_generation")
BAD_WORDS = Planned("plan.sampling_of", SAMPLING + "test_bad_words_are_never_generated")
FORMATS = "tests/api/test_completions_formats.py::"
PREDICTION = Planned("api.core.prediction.prediction_token_ids",
                     "tests/api/test_prediction.py::test_speculation_token_ids_leave_the_completion_unchanged")
FORMAT = Planned("plan.answer_grammar", FORMATS + "test_json_schema_answers_validate")
SERVERLESS = "tests/api/test_serverless_completions.py::"
BEAMS = "tests/api/test_completions_beams.py::"
REASONING = "tests/api/test_completions_reasoning.py::"
REASONING_CONTROL = Planned("reasoning.completion_reasoning", REASONING + "test_reasoning_controls_split_the_thinking_off")
EMBEDDINGS = Planned("embeddings.replaced_embeddings",
                     "tests/api/test_completions_embeddings.py::test_a_replaced_embedding_answers_like_its_token")

# Fields both dialects share, with the same handling.
COMMON = {
    "model": Planned(PIPELINE, BASIC + "test_an_unknown_model_is_404"),
    "n": Planned("plan.choice_requests", BASIC + "test_choice_index_is_prompt_index_times_n_plus_i"),
    "stream": Planned(PIPELINE, STREAM + "test_stream_carries_the_same_text_as_the_response"),
    "stop": Planned("plan.stop_criteria", BASIC + "test_stop_strings_are_found_across_token_boundaries"),
    "max_tokens": MAX_TOKENS,
    "seed": Planned("plan.choice_requests", BASIC + "test_a_seed_reproduces_choices_that_differ"),
    "logprobs": LOGPROBS_COUNT,
    **{name: Sampled() for name in ("temperature", "top_k", "top_p", "min_p", "frequency_penalty",
                                    "presence_penalty", "repetition_penalty")},
}

FIREWORKS = ModelFields(fireworks.CompletionRequest, {
    **COMMON,
    "prompt": PROMPT,
    "user": TRACING,
    "prompt_cache_key": SESSION,
    "metadata": TRACING,
    "raw_output": Planned("render.raw_output", BASIC + "test_raw_output_shows_what_the_model_saw"),
    "perf_metrics_in_response": Planned("render.perf_metrics", BASIC + "test_perf_metrics_in_headers_and_body"),
    "max_completion_tokens": MAX_TOKENS,
    "top_logprobs": Planned("plan.logprobs_of", LOGPROBS + "test_boolean_logprobs_give_the_content_format"),
    "echo": Planned("plan.echo_count", LOGPROBS + "test_echo_puts_prompt_logprobs_first"),
    "echo_last": Planned("plan.echo_count", LOGPROBS + "test_echo_last_echoes_the_prompt_suffix"),
    "context_length_exceeded_behavior": Planned(
        "plan.max_tokens_for", BASIC + "test_context_length_exceeded_truncates_or_refuses"),
    "logit_bias": Planned("plan.sampling_of", SAMPLING + "test_logit_bias_forces_a_token"),
    "return_token_ids": Planned("render.choice_fields", BASIC + "test_return_token_ids"),
    **{name: Sampled() for name in ("typical_p", "mirostat_target", "mirostat_lr")},
    "ignore_eos": Stopping(),
    "prompt_cache_isolation_key": ISOLATION,
    "response_format": FORMAT,
    "speculation": PREDICTION,
    "prediction": PREDICTION,
    "reasoning_effort": REASONING_CONTROL,
    "reasoning_history": Planned("reasoning.completion_reasoning", REASONING + "test_history_controls_are_for_chat"),
    "thinking": REASONING_CONTROL,
    "images": f"{refusals.TEXT_ONLY}: it cannot take images",
    "service_tier": TIER,
})

FRIENDLI_FIELDS = {
    **COMMON,
    "bad_word_tokens": BAD_WORDS,
    "bad_words": BAD_WORDS,
    "eos_token": STOP_TOKENS,
    "stop_tokens": STOP_TOKENS,
    "forced_output_tokens": Planned("plan.sampling_of", SAMPLING + "test_forced_output_tokens_come_first"),
    "max_total_tokens": Planned("plan.max_tokens_for", SAMPLING + "test_total_token_bounds"),
    "min_total_tokens": Stopping(),
    "min_tokens": Stopping(),
    "no_repeat_ngram": Planned("plan.sampling_of", SAMPLING + "test_sampling_fields_reach_the_engine"),
    "xtc_threshold": Sampled(),
    "xtc_probability": Sampled(),
    "stream_options": Planned("plan.plan_completion", STREAM + "test_include_usage_adds_a_final_usage_chunk"),
    "response_format": FORMAT,
    "embedding_to_replace": EMBEDDINGS,
    "token_index_to_replace": EMBEDDINGS,
    "encoder_no_repeat_ngram": "only for encoder-decoder models; this server serves decoder-only models",
    "encoder_repetition_penalty": "only for encoder-decoder models; this server serves decoder-only models",
}


def _not_default(default):
    return lambda value: value is not None and value != default


REGISTRY = Registry([
    FIREWORKS,
    ModelFields(friendli.CompletionsBodyWithPrompt, {**FRIENDLI_FIELDS, "prompt": PROMPT}),
    ModelFields(friendli.CompletionsBodyWithTokens, {**FRIENDLI_FIELDS, "tokens": PROMPT}),
    ModelFields(friendli.StreamOptions, {
        "include_usage": Planned("render.completion_chunks", STREAM + "test_include_usage_adds_a_final_usage_chunk"),
        "continuous_usage_stats": Planned("render.completion_chunks",
                                          STREAM + "test_continuous_usage_stats_counts_in_every_chunk")}),
    ModelFields(friendli.TokenSequence, {"tokens": STOP_TOKENS}),
    ModelFields(fireworks.ResponseFormat, {
        "type": FORMAT, "schema_": FORMAT, "json_schema": FORMAT,
        "grammar": Planned("plan.answer_grammar", FORMATS + "test_fireworks_gbnf_grammar_is_followed")}),
    ModelFields(friendli.ResponseFormatJsonSchema, {"type": FORMAT, "json_schema": FORMAT}),
    ModelFields(friendli.ResponseFormatJsonSchemaSchema, {"schema_": FORMAT}),
    ModelFields(friendli.ResponseFormatJsonObject, {"type": FORMAT}),
    ModelFields(friendli.ResponseFormatText, {"type": FORMAT}),
    ModelFields(friendli.ResponseFormatRegex, {
        "type": FORMAT, "schema_": Planned("plan.answer_grammar", FORMATS + "test_friendli_regex_is_followed")}),
    ModelFields(fireworks.ThinkingConfigEnabled, {
        "type": REASONING_CONTROL,
        "budget_tokens": Planned("api.core.reasoning.enabled_ask", REASONING + "test_a_thinking_budget_ends_with_its_phrase"),
        "budget_end_str": Planned("api.core.reasoning.bridge_phrase",
                                  REASONING + "test_a_thinking_budget_ends_with_its_phrase"),
        "keep": Planned("reasoning.completion_reasoning", REASONING + "test_history_controls_are_for_chat")}),
    ModelFields(fireworks.ThinkingConfigDisabled, {"type": REASONING_CONTROL}),
    ModelFields(fireworks.PredictedOutput, {"type": PREDICTION, "content": PREDICTION}),
    ModelFields(fireworks.ChatMessageContent, {
        "type": PREDICTION, "text": PREDICTION,
        **{name: "a predicted output is text" for name in ("image_url", "video_url")}}),
    ModelFields(serverless.ServerlessCompletionsExtensionRequest, {
        "timeout": Planned("plan.plan_completion", BASIC + "test_a_timeout_while_queued_is_429"),
        "include_output_logprobs": Planned(
            "plan.logprobs_of", LOGPROBS + "test_include_output_logprobs_gives_token_logprobs"),
        "num_beams": Planned("beams.beam_params", BEAMS + "test_beams_are_the_choices_best_first"),
        "length_penalty": Planned("beams.beam_params", BEAMS + "test_length_penalty_and_early_stopping_reach_the_search"),
        "early_stopping": Planned("beams.beam_params", BEAMS + "test_length_penalty_and_early_stopping_reach_the_search"),
        "beam_search_type": Planned("beams.beam_params", BEAMS + "test_sampled_beam_searches_follow_their_seed"),
        "include_output_logits": Planned("plan.sampling_of", SERVERLESS + "test_include_output_logits_gives_raw_logits"),
    }),
    ModelFields(OpenAILegacyFields, {
        "best_of": Refused("only best_of 1 is served", _not_default(1)),
        "suffix": Refused("insertion (suffix) is not supported", lambda value: value is not None),
    }),
    ModelFields(flint.CompletionsExtensionRequest, {
        "routing_matrices": Planned("routing.routing_replay", "tests/api/test_model_families_http.py::"
                                    "test_moe_logprobs_carry_routing_matrices_that_replay"),
    }),
    # The AsyncAPI message of a streamed completion is a subset of the Fireworks body, served
    # by the same route with the same handling.
    ModelFields(streaming.CompletionRequest, like=fireworks.CompletionRequest),
])
