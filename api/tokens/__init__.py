"""The tokenizer routes: tokenize, detokenize and tokenizer_info, under /v1 and at the root (vLLM's shapes)."""
