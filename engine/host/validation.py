"""What a request must be for an engine to serve it: checked before it is queued, so that a
request that could never be served is a ValueError (a 400) rather than a fault mid-step."""

from __future__ import annotations

from engine.config import ModelConfig
from engine.host.embeddings import check_embeddings
from engine.host.request import Request
from engine.host.routing_replay import check_routing_replay
from engine.text.grammar import GrammarCompiler


def check_request(request: Request, max_model_len: int, model: ModelConfig, grammars: GrammarCompiler) -> None:
    """Raise ValueError, saying what is wrong, for a request the engine can never serve."""
    prompt = request.prompt_token_ids
    if not prompt:
        raise ValueError("the prompt is empty")
    if len(prompt) >= max_model_len:
        raise ValueError(f"the prompt has {len(prompt)} tokens; this engine's limit is "
                         f"{max_model_len - 1} (max_model_len {max_model_len})")
    if any(not 0 <= token < model.vocab_size for token in prompt):
        raise ValueError(f"prompt token ids must lie in [0, {model.vocab_size})")
    # max_tokens 0 is a prefill that only scores the prompt (lm-eval's loglikelihood).
    if request.stop.max_tokens < (0 if request.sampling.prompt_logprobs is not None else 1):
        raise ValueError("max_tokens must be at least 1 (0 only with prompt logprobs)")
    if any(not string for string in request.stop.strings):
        raise ValueError("stop strings must not be empty")
    if request.grammar is not None:
        grammars.check(request.grammar)  # GrammarError, a ValueError, names what is wrong
    check_embeddings(request, model.hidden_size)
    check_routing_replay(request, model)
