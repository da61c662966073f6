"""The Litestar HTTP API: routes, conversion between generated models and the engine, SSE."""
