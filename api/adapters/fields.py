"""The field registry of the adapter routes (api/core/registry.py): vLLM's request shapes."""

from __future__ import annotations

from api.core.registry import ModelFields, Planned, Registry
from generated.flint import LoadLoraAdapterRequest, UnloadLoraAdapterRequest

TESTS = "tests/api/test_lora_http.py::"
NAME = Planned("api.adapters.route.load_lora_adapter", TESTS + "test_an_adapter_loaded_at_run_time_serves_by_name")

REGISTRY = Registry([
    ModelFields(LoadLoraAdapterRequest, {
        "lora_name": NAME,
        "lora_path": Planned("api.adapters.route.load_lora_adapter", TESTS + "test_a_bad_adapter_is_a_400_naming_lora_path"),
        "load_inplace": Planned("api.adapters.route.load_lora_adapter", TESTS + "test_load_inplace_replaces_and_its_kv_is_not_shared"),
    }),
    ModelFields(UnloadLoraAdapterRequest, {
        "lora_name": Planned("api.adapters.route.unload_lora_adapter", TESTS + "test_unloading_under_load_loses_no_request"),
    }),
])
