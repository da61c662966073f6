"""GET /v1/models and /v1/models/{model}: the model this server serves, and each LoRA
adapter loaded on it, whose `parent` is the served model (vLLM's shape)."""

from __future__ import annotations

from pathlib import Path

from litestar import get
from litestar.datastructures import State
from litestar.params import FromPath

from api.core.errors import model_not_found
from api.core.state import ServerState
from engine.async_encoder import AsyncEncoder
from engine.loader.lora import LoraAdapter
from generated.flint import Model, ModelList


def describe(server: ServerState) -> Model:
    source = server.model
    return Model(
        id=source.id,
        object="model",
        created=server.started_at,
        owned_by="flint",
        root=source.path.name,  # the checkpoint's name: its path on the server is nobody's business
        max_model_len=server.max_model_len,  # what the engine serves: capped at the model's context
        task="generate",
    )


def describe_encoder(server: ServerState, encoder: AsyncEncoder) -> Model:
    """An embedder or reranker served beside the chat model (api/server/encoders.py)."""
    checkpoint = encoder.checkpoint
    return Model(id=checkpoint.id, object="model", created=server.started_at, owned_by="flint", root=checkpoint.id,
                 max_model_len=checkpoint.max_tokens, task=checkpoint.task)


def describe_adapter(server: ServerState, adapter: LoraAdapter) -> Model:
    return Model(id=adapter.name, object="model", created=server.started_at, owned_by="flint",
                 root=Path(adapter.path).name, parent=server.model.id, max_model_len=server.max_model_len,
                 task="generate")


def served_models(server: ServerState) -> list[Model]:
    adapters = list(server.adapters.adapters.values()) if server.adapters is not None else []
    return [describe(server), *(describe_adapter(server, adapter) for adapter in adapters),
            *(describe_encoder(server, encoder) for encoder in server.encoders.values())]


@get("/models", sync_to_thread=False)
def list_models(state: State) -> ModelList:
    return ModelList(object="list", data=served_models(state.server))


@get("/models/{model_id:str}", sync_to_thread=False)
def retrieve_model(state: State, model_id: FromPath[str]) -> Model:
    model = next((model for model in served_models(state.server) if model.id == model_id), None)
    if model is None:
        raise model_not_found(model_id)
    return model
