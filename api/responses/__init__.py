"""The OpenAI Responses API: POST /v1/responses, and the stored responses."""
