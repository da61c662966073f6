"""POST /v1/chat/completions and the stored chat completions (OpenAI's dialect, with Fireworks' chat extensions)."""
