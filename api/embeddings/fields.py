"""The field registry of the embedding routes (api/core/registry.py): OpenAI's embeddings
request, the Cohere/Jina rerank request and vLLM's score request."""

from __future__ import annotations

from api.core.registry import Accepted, ModelFields, Planned, Registry
from generated.flint import EmbeddingRequest, RerankDocument, RerankRequest, ScoreRequest

TESTS = "tests/api/test_embeddings.py::"
MODEL = Planned("route.encoder_for", TESTS + "test_a_model_that_cannot_serve_the_route_is_a_400_naming_model")

REGISTRY = Registry([
    ModelFields(EmbeddingRequest, {
        "input": Planned("body.embedding_inputs", TESTS + "test_every_input_form_embeds_as_the_reference"),
        "model": MODEL,
        "encoding_format": Planned("route.encoded_vector", TESTS + "test_base64_holds_the_float32_vector"),
        "dimensions": Planned("route.cut_to", TESTS + "test_dimensions_cut_a_matryoshka_model_and_refuse_another"),
        "user": Accepted("the end user's id is for the vendor's abuse monitoring; this server has none"),
        "truncate_prompt_tokens": Planned("body.truncation", TESTS + "test_a_long_input_is_a_400_unless_truncated"),
    }),
    ModelFields(RerankRequest, {
        "model": MODEL,
        "query": Planned("route.relevance", TESTS + "test_rerank_orders_as_the_reference_cross_encoder"),
        "documents": Planned("body.document_texts", TESTS + "test_rerank_orders_as_the_reference_cross_encoder"),
        "top_n": Planned("route.rerank", TESTS + "test_top_n_keeps_the_best_and_refuses_zero"),
        "return_documents": Planned("route.rerank", TESTS + "test_top_n_keeps_the_best_and_refuses_zero"),
        "max_tokens_per_doc": Planned("body.pair_inputs", TESTS + "test_max_tokens_per_doc_cuts_each_document"),
    }),
    ModelFields(RerankDocument, {
        "text": Planned("body.document_texts", TESTS + "test_rerank_orders_as_the_reference_cross_encoder"),
    }),
    ModelFields(ScoreRequest, {
        "model": MODEL,
        "text_1": Planned("body.score_pairs", TESTS + "test_score_pairs_one_against_many_and_pairwise"),
        "text_2": Planned("body.score_pairs", TESTS + "test_score_pairs_one_against_many_and_pairwise"),
        "truncate_prompt_tokens": Planned("body.truncation", TESTS + "test_a_long_input_is_a_400_unless_truncated"),
    }),
])
