"""The embedding routes' bodies to encoder inputs: each way one can be wrong is a 400 naming
its field (the input or document by index), before anything queues for the encoder.

Decided here (README, "Embeddings, reranking and scoring"):
- an empty string is a text like any other: its vector is that of the model's special
  tokens alone ([CLS] [SEP]); an empty list of inputs, or an input of no token ids, is a 400;
- at most MAX_INPUTS inputs (OpenAI's limit) or documents a request;
- an input longer than the model takes is a 400 naming it, unless truncate_prompt_tokens
  (vLLM's: keep the last k tokens, the special tokens kept; -1: the model's limit) is given.
"""

from __future__ import annotations

from collections.abc import Sequence

from api.core.errors import invalid
from api.core.limits import check_list
from engine.device.encoder_runner import EncoderInput
from engine.loader.encoder_checkpoint import EncoderCheckpoint
from generated.flint import EmbeddingRequest, RerankRequest, ScoreRequest

MAX_INPUTS = 2048


def truncation(value: int | None, checkpoint: EncoderCheckpoint) -> int | None:
    """truncate_prompt_tokens as a count of tokens (None: no truncation)."""
    if value is None:
        return None
    if value == -1:
        return checkpoint.max_tokens
    if not 1 <= value <= checkpoint.max_tokens:
        raise invalid("truncate_prompt_tokens", f"truncate_prompt_tokens must be -1 or lie in [1, "
                      f"{checkpoint.max_tokens}] (the model's limit); got {value}")
    return value


def embedding_inputs(request: EmbeddingRequest, checkpoint: EncoderCheckpoint) -> list[EncoderInput]:
    """One input per text or list of token ids, each within the model's limit."""
    items = request.input
    if isinstance(items, str):
        items = [items]
    if not items:
        raise invalid("input", "input must not be empty")
    if all(isinstance(item, int) for item in items):  # one input of token ids
        return [ids_input(items, "input", checkpoint, truncation(request.truncate_prompt_tokens, checkpoint))]
    check_list("input", items, MAX_INPUTS, "inputs")
    limit = truncation(request.truncate_prompt_tokens, checkpoint)
    tokenizer = checkpoint.tokenizer
    inputs = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            ids = tokenizer.encode(item) if limit is None else tokenizer.encode_truncated(item, limit)
            inputs.append(within_limit(EncoderInput(ids), f"input[{index}]", checkpoint))
        else:
            inputs.append(ids_input(item, f"input[{index}]", checkpoint, limit))
    return inputs


def ids_input(ids: Sequence[int], field: str, checkpoint: EncoderCheckpoint, limit: int | None) -> EncoderInput:
    """Token ids as given (the client's own special tokens), in the vocabulary."""
    if not ids:
        raise invalid(field, f"{field} holds no token ids")
    vocab = checkpoint.config.vocab_size
    outside = next((token for token in ids if not 0 <= token < vocab), None)
    if outside is not None:
        raise invalid(field, f"{field}: token ids must lie in [0, {vocab}); got {outside}")
    ids = list(ids) if limit is None else list(ids)[-limit:]
    return within_limit(EncoderInput(ids), field, checkpoint)


def within_limit(item: EncoderInput, field: str, checkpoint: EncoderCheckpoint) -> EncoderInput:
    if len(item.ids) > checkpoint.max_tokens:
        raise invalid(field, f"{field} has {len(item.ids)} tokens; {checkpoint.id} takes at most "
                      f"{checkpoint.max_tokens} (truncate_prompt_tokens cuts it)")
    return item


def document_texts(request: RerankRequest) -> list[str]:
    if not request.documents:
        raise invalid("documents", "documents must not be empty")
    check_list("documents", request.documents, MAX_INPUTS, "documents")
    return [document if isinstance(document, str) else document.text for document in request.documents]


def score_pairs(request: ScoreRequest) -> list[tuple[str, str]]:
    """vLLM's pairing: one text_1 against each text_2, or the two lists pairwise."""
    firsts = [request.text_1] if isinstance(request.text_1, str) else request.text_1
    seconds = [request.text_2] if isinstance(request.text_2, str) else request.text_2
    for field, texts in (("text_1", firsts), ("text_2", seconds)):
        if not texts:
            raise invalid(field, f"{field} must not be empty")
        check_list(field, texts, MAX_INPUTS, "texts")
    if len(firsts) == 1:
        firsts = firsts * len(seconds)
    if len(firsts) != len(seconds):
        raise invalid("text_2", f"text_2 must hold one text, or as many as text_1 ({len(firsts)}); got {len(seconds)}")
    return list(zip(firsts, seconds))


def pair_inputs(pairs: list[tuple[str, str]], checkpoint: EncoderCheckpoint, field: str,
                limit: int | None = None, per_document: int | None = None) -> list[EncoderInput]:
    """A reranker's inputs: each pair in one input (as the checkpoint joins them), its second text cut to `per_document`
    tokens, and then to what `limit` leaves of the pair, where given; a pair past the
    model's limit is a 400 naming `field[index]`."""
    inputs = []
    for index, (first, second) in enumerate(pairs):
        room = per_document
        if limit is not None:
            left = limit - len(checkpoint.encode_pair(first, "")[0])
            room = left if room is None else min(room, left)
        ids, types = checkpoint.encode_pair(first, second, room)
        inputs.append(within_limit(EncoderInput(ids, types), f"{field}[{index}]", checkpoint))
    return inputs


def text_inputs(texts: list[str], checkpoint: EncoderCheckpoint, field: str, limit: int | None = None,
                keep: str = "last") -> list[EncoderInput]:
    """An embedder's inputs for `texts`, each cut to `limit` tokens where given (keeping its
    `keep` tokens); one too long is a 400 naming `field[index]`."""
    tokenizer = checkpoint.tokenizer
    return [within_limit(EncoderInput(tokenizer.encode(text) if limit is None else
                                      tokenizer.encode_truncated(text, limit, keep)),
                         f"{field}[{index}]", checkpoint) for index, text in enumerate(texts)]
