"""What every API dialect shares: the generation path, prompts, the field registry, errors, SSE."""
