"""POST /v1/completions: text completions in the Fireworks and Friendli dialects."""
