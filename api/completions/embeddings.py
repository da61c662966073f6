"""Friendli's `token_index_to_replace` and `embedding_to_replace`: input embeddings that take
the place of the prompt tokens' own (engine/host/embeddings.py does the rest).

`embedding_to_replace` is flattened: one vector of the model's hidden size per index, in
the order of the indices. Every way a request can get this wrong is a 400 naming the field:
one list without the other, a length that is not (indices x hidden size), an index outside
the prompt or given twice, a value that is not a finite number, or a request of several
prompts (the indices name positions of one prompt).
"""

from __future__ import annotations

import math
from typing import Any

from api.core.errors import invalid
from api.core.state import ServerState
from engine.host.request import EmbeddingReplacement

INDICES = "token_index_to_replace"
VALUES = "embedding_to_replace"


def replaced_embeddings(body: Any, server: ServerState, prompts: list[list[int]]) -> tuple[EmbeddingReplacement, ...]:
    """The request's replacements, checked against its prompt and the served model."""
    indices, values = body.token_index_to_replace, body.embedding_to_replace
    if not indices and not values:
        return ()
    if not indices or not values:
        missing, given = (INDICES, VALUES) if not indices else (VALUES, INDICES)
        raise invalid(missing, f"`{given}` needs `{missing}` beside it")
    if len(prompts) != 1:
        raise invalid(INDICES, f"`{INDICES}` names positions of one prompt; this request has {len(prompts)}")
    hidden_size = server.running_engine.engine.model_config.hidden_size
    check_values(values, len(indices), hidden_size)
    check_indices(indices, len(prompts[0]))
    return tuple(EmbeddingReplacement(index, tuple(values[k * hidden_size: (k + 1) * hidden_size]))
                 for k, index in enumerate(indices))


def check_values(values: list[float], num_indices: int, hidden_size: int) -> None:
    expected = num_indices * hidden_size
    if len(values) != expected:
        raise invalid(VALUES, f"`{VALUES}` holds {len(values)} numbers; {num_indices} embedding(s) of the "
                              f"model's hidden size {hidden_size} are {expected}")
    if not all(math.isfinite(value) for value in values):
        raise invalid(VALUES, f"`{VALUES}` must hold finite numbers")


def check_indices(indices: list[int], num_prompt_tokens: int) -> None:
    for index in indices:
        if not 0 <= index < num_prompt_tokens:
            raise invalid(INDICES, f"`{INDICES}` holds {index}, outside the prompt's {num_prompt_tokens} "
                                   f"tokens (0 to {num_prompt_tokens - 1})")
    if len(set(indices)) != len(indices):
        raise invalid(INDICES, f"`{INDICES}` names a position more than once")
