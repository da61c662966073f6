"""The embedding routes: /v1/embeddings, /v1/rerank and /v1/score, served by encoder models."""
