"""The JAX engine: model, paged KV cache, scheduler, sampling. Knows nothing of HTTP."""
