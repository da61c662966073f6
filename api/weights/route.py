"""POST /v1/update_weights, GET /v1/weights_version, and vLLM's POST /sleep, POST /wake_up,
GET /is_sleeping and POST /reset_prefix_cache, for a trainer in another process.

The routes that change what the server serves are off unless it was started with
`--allow-runtime-weights`: they read folders of the caller's choosing and stop every
tenant's requests, which is the operator's to open, not any key holder's. Each runs on
the engine thread once no request is unfinished (engine/async_engine.py `control`).
"""

from __future__ import annotations

from litestar import Request, get, post
from litestar.datastructures import State
from litestar.response import Response

from api.core.errors import ApiError
from api.core.validation import parse_body, read_json_body
from api.weights.fields import REGISTRY
from engine.async_engine import DRAIN
from engine.residency import SLEEP_LEVELS, memory_in_use
from generated.flint import InFlightMode, MemoryInUse, SleepState, UpdateWeightsRequest, WeightsVersion


@post("/update_weights", status_code=200)
async def update_weights(request: Request, state: State) -> Response[dict]:
    require_runtime_weights(state)
    body = parse_body(UpdateWeightsRequest, await read_json_body(request))
    REGISTRY.refuse_within(body)
    try:
        await state.server.running_engine.control(lambda e: e.residency.update_weights(path=body.path),
                             InFlightMode(body.mode).value if body.mode is not None else DRAIN)
    except ValueError as error:
        raise ApiError(400, f"the weights at path could not be served: {error}", param="path") from error
    return Response(version_body(state))


@get("/weights_version", sync_to_thread=False)
def weights_version(state: State) -> Response[dict]:
    return Response(version_body(state))


@post("/sleep", status_code=200)
async def sleep(state: State, level: int = 1, mode: str = DRAIN) -> Response[dict]:
    require_runtime_weights(state)
    if level not in SLEEP_LEVELS:
        raise ApiError(400, f"level must be 1 or 2, not {level}", param="level")
    before = memory_in_use()
    await state.server.running_engine.control(lambda e: e.residency.sleep(level), checked_mode(mode))
    return Response(sleep_body(state, before))


@post("/wake_up", status_code=200)
async def wake_up(state: State) -> Response[dict]:
    require_runtime_weights(state)
    before = memory_in_use()
    try:
        await state.server.running_engine.control(lambda e: e.residency.wake_up())
    except ValueError as error:
        raise ApiError(400, str(error)) from error
    return Response(sleep_body(state, before))


@get("/is_sleeping", sync_to_thread=False)
def is_sleeping(state: State) -> Response[dict]:
    return Response(sleep_body(state))


@post("/reset_prefix_cache", status_code=200)
async def reset_prefix_cache(state: State) -> Response[str]:
    require_runtime_weights(state)
    await state.server.running_engine.control(lambda e: e.residency.reset_prefix_cache())
    return Response("", media_type="text/plain")


def checked_mode(mode: str) -> str:
    if mode not in {member.value for member in InFlightMode}:
        raise ApiError(400, f"mode must be one of {', '.join(m.value for m in InFlightMode)}, not {mode!r}",
                       param="mode")
    return mode


def version_body(state: State) -> dict:
    residency = state.server.running_engine.engine.residency
    return WeightsVersion(weights_version=residency.version, path=residency.source_path).model_dump(mode="json")


def sleep_body(state: State, before: dict | None = None) -> dict:
    level = state.server.running_engine.engine.residency.sleep_level
    body = SleepState(is_sleeping=level > 0, level=level, memory=MemoryInUse(**memory_in_use()),
                      memory_before=None if before is None else MemoryInUse(**before))
    return body.model_dump(mode="json", exclude_none=True)


def require_runtime_weights(state: State) -> None:
    if not state.server.settings.allow_runtime_weights:
        raise ApiError(403, "Changing the served weights, sleeping and waking are off on this server: start it with "
                            "--allow-runtime-weights.", error_type="permission_error", code="runtime_weights_disabled")


V1_HANDLERS = [update_weights, weights_version]
ROOT_HANDLERS = [sleep, wake_up, is_sleeping, reset_prefix_cache]
__all__ = ["REGISTRY", "ROOT_HANDLERS", "V1_HANDLERS"]
