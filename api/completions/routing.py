"""MoE Router Replay through /v1/completions: the `routing_matrix` of each content logprobs
entry, and `routing_matrices` handing them back (engine/host/routing_replay.py does the rest).

A routing matrix is one token's experts in every layer of a mixture-of-experts model: the
experts of the forward that gave the entry's logprob (a generated token's: the token before
it; the first prompt token has none). Encoded compactly, as README.md documents: the
expert ids layer by layer (layers x experts per token of them), one byte each, or two
bytes little-endian when the model has more than 256 experts, in standard base64. A model
without experts leaves it null.

Handed back as `routing_matrices` (spec/openapi/flint.yaml CompletionsExtensionRequest),
entry i replays prompt token i's routing. Every way a request can get it wrong is a 400
naming the field or the entry: a model without experts, several prompts, more entries than
the prompt has tokens, a string that is not base64 of the right length, or an entry whose
layer names an expert twice or one the model does not have.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from api.core.errors import invalid
from api.core.state import ServerState
from engine.config import ModelConfig
from engine.host.routing_replay import check_position

FIELD = "routing_matrices"


def id_bytes(model: ModelConfig) -> int:
    """Bytes an expert id takes in a routing matrix: one, or two past 256 experts."""
    return 1 if model.num_experts <= 256 else 2


def routing_matrix(routing: tuple[int, ...] | None, model: ModelConfig) -> str | None:
    """The routing matrix string of a logprobs entry's routing (None: none)."""
    if routing is None:
        return None
    return base64.b64encode(b"".join(expert.to_bytes(id_bytes(model), "little") for expert in routing)).decode()


def routing_replay(body: Any, server: ServerState, prompts: list[list[int]]) -> tuple[tuple[int, ...] | None, ...]:
    """The request's replayed routing by prompt position, checked against the model and
    its prompt; () when it gives none."""
    matrices = getattr(body, FIELD, None)
    if not matrices:
        return ()
    model = server.running_engine.engine.model_config
    if not model.num_experts:
        raise invalid(FIELD, f"`{FIELD}` replays a mixture-of-experts model's routing; this model has no experts")
    if len(prompts) != 1:
        raise invalid(FIELD, f"`{FIELD}` replays the routing of one prompt; this request has {len(prompts)}")
    if len(matrices) > len(prompts[0]):
        raise invalid(FIELD, f"`{FIELD}` has {len(matrices)} entries and the prompt {len(prompts[0])} tokens: only "
                             "prompt tokens are replayed (append a generation to the prompt to replay it)")
    return tuple(None if matrix is None else decoded(matrix, index, model) for index, matrix in enumerate(matrices))


def decoded(matrix: str, index: int, model: ModelConfig) -> tuple[int, ...]:
    """Entry `index`'s expert ids, layer by layer."""
    field = f"{FIELD}[{index}]"
    layers, picked = model.routing_shape
    width = id_bytes(model)
    try:
        raw = base64.b64decode(matrix, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(field, f"`{field}` is not base64") from None
    if len(raw) != layers * picked * width:
        raise invalid(field, f"`{field}` holds {len(raw)} bytes; a routing matrix of this model is {layers} layers x "
                             f"{picked} experts x {width} byte(s) = {layers * picked * width}")
    routing = tuple(int.from_bytes(raw[start:start + width], "little") for start in range(0, len(raw), width))
    try:
        check_position(index, routing, layers, picked, model.num_experts)
    except ValueError as error:
        raise invalid(field, f"`{field}`: {error}") from None
    return routing
