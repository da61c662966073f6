"""Rollout Routing Replay (R3): a request's prompt tokens routed to given experts.

A mixture-of-experts model's router picks each token's experts in every layer. A trainer
that recomputes a rollout's logprobs gets other picks wherever its arithmetic differs, and
a token routed elsewhere is another function of the weights. So the engine reports each
token's routing (the experts of the forward that gave its logprob: engine/device/runner.py
`with_routing`), and a request can hand routings back to be replayed: at each given prompt
position the experts are the given ones, weighted by the live router's own probabilities
of them (engine/models/moe.py `route`).

A routing is one tuple per prompt position, from the first: the position's experts, layer
by layer, num_experts_per_tok each (layers x k ids), or None where the router picks.
Only prompt positions are replayed: to replay a generation, append it to the prompt.

Host side only, as replaced embeddings are (engine/host/embeddings.py):
- `check_routing_replay`: a model with experts, positions within the prompt, layers x k
  distinct ids per layer, each below num_experts.
- The prefix cache: KV computed under a replayed routing is not the KV of the router's,
  so the sequence's page hashes start from a salt that digests the routing (`salted`).
- Preemption recomputes from the tokens; the chunk's routing is looked up by position
  whenever a chunk is planned (`replayed_between`), so it applies again.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.config import ModelConfig
    from engine.host.request import Request
    from engine.host.sequence import Sequence

Routing = tuple[int, ...] | None  # one position's experts, layer by layer (layers x k ids)


def check_routing_replay(request: Request, model: ModelConfig) -> None:
    """ValueError unless the request's replayed routing fits the model and the prompt."""
    replay = request.routing_replay
    if not replay:
        return
    if not model.num_experts:
        raise ValueError("routing replay needs a mixture-of-experts model; this model routes no tokens")
    if len(replay) > len(request.prompt_token_ids):
        raise ValueError(f"routing replay gives {len(replay)} positions and the prompt has "
                         f"{len(request.prompt_token_ids)} tokens: only prompt positions are replayed (append a "
                         "generation to the prompt to replay it)")
    layers, picked = model.routing_shape
    for position, routing in enumerate(replay):
        if routing is not None:
            check_position(position, routing, layers, picked, model.num_experts)


def check_position(position: int, routing: tuple[int, ...], layers: int, picked: int, num_experts: int) -> None:
    if len(routing) != layers * picked:
        raise ValueError(f"position {position}'s routing has {len(routing)} expert ids; the model routes each "
                         f"token to {picked} experts in each of {layers} layers ({layers * picked})")
    for layer in range(layers):
        experts = routing[layer * picked: (layer + 1) * picked]
        if any(not 0 <= expert < num_experts for expert in experts):
            raise ValueError(f"position {position}, layer {layer}: expert ids must lie in [0, {num_experts})")
        if len(set(experts)) != picked:
            raise ValueError(f"position {position}, layer {layer}: the {picked} experts must be distinct")


def salted(salt: bytes, replay: tuple[Routing, ...]) -> bytes:
    """The root of a replaying sequence's page-hash chain: `salt` (the sequence's own, from
    its replaced embeddings) digested with every replayed position, so that only the very
    same prompt under the very same routing shares its pages."""
    if not any(routing is not None for routing in replay):
        return salt
    digest = hashlib.blake2b(b"routing" + salt, digest_size=16)
    for position, routing in enumerate(replay):
        if routing is not None:
            digest.update(array("q", [position, *routing]).tobytes())
    return digest.digest()


def replayed_between(seq: Sequence, start: int, count: int) -> list[Routing] | None:
    """The replayed routing of positions [start, start + count) (None where the router
    picks), or None when none of them is replayed."""
    chunk = list(seq.routing_replay[start: start + count])
    if not any(routing is not None for routing in chunk):
        return None
    return chunk + [None] * (count - len(chunk))
