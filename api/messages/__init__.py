"""POST /v1/messages: Anthropic's Messages API, whole or streamed, with Anthropic-shaped errors."""
