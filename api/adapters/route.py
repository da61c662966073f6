"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter: vLLM's routes and bodies, and
its plain-text answers. Behind the API key like every /v1 route, and off unless the server
was started with --allow-runtime-lora (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING): a route
that reads directories of the server's choosing and replaces what another tenant's requests
run is the operator's to open, not any key holder's."""

from __future__ import annotations

from litestar import Request, post
from litestar.datastructures import State
from litestar.response import Response

from api.adapters.fields import REGISTRY
from api.core.errors import ApiError
from api.core.validation import parse_body, read_json_body
from generated.flint import LoadLoraAdapterRequest, UnloadLoraAdapterRequest


@post("/load_lora_adapter", status_code=200)
async def load_lora_adapter(request: Request, state: State) -> Response[str]:
    require_runtime_loading(state)
    body = parsed(LoadLoraAdapterRequest, await read_json_body(request))
    await state.server.adapter_registry.load_async(body.lora_name, body.lora_path, body.load_inplace)
    return Response(f"Success: LoRA adapter '{body.lora_name}' added successfully.", media_type="text/plain")


@post("/unload_lora_adapter", status_code=200)
async def unload_lora_adapter(request: Request, state: State) -> Response[str]:
    require_runtime_loading(state)
    body = parsed(UnloadLoraAdapterRequest, await read_json_body(request))
    state.server.adapter_registry.unload(body.lora_name)
    return Response(f"Success: LoRA adapter '{body.lora_name}' removed successfully.", media_type="text/plain")


def require_runtime_loading(state: State) -> None:
    if not state.server.settings.allow_runtime_lora:
        raise ApiError(403, "Loading and unloading LoRA adapters at run time is off on this server: start it with "
                            "--allow-runtime-lora (adapters named with --lora are served either way).",
                       error_type="permission_error", code="runtime_lora_disabled")


def parsed(model: type, raw: object):
    body = parse_body(model, raw)
    REGISTRY.refuse_within(body)
    return body


HANDLERS = [load_lora_adapter, unload_lora_adapter]
__all__ = ["HANDLERS", "REGISTRY"]
