"""GET /v1/models and /v1/models/{model}: the model this server serves."""

from __future__ import annotations

from litestar import get
from litestar.datastructures import State
from litestar.params import FromPath

from api.core.errors import model_not_found
from api.core.state import ServerState
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
    )


@get("/models", sync_to_thread=False)
def list_models(state: State) -> ModelList:
    return ModelList(object="list", data=[describe(state.server)])


@get("/models/{model_id:str}", sync_to_thread=False)
def retrieve_model(state: State, model_id: FromPath[str]) -> Model:
    model = describe(state.server)
    if model_id != model.id:
        raise model_not_found(model_id)
    return model
