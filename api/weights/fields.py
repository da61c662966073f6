"""The field registry of the weights routes (api/core/registry.py)."""

from __future__ import annotations

from api.core.registry import ModelFields, Planned, Registry
from generated.flint import UpdateWeightsRequest

TESTS = "tests/api/test_weights_http.py::"

REGISTRY = Registry([
    ModelFields(UpdateWeightsRequest, {
        "path": Planned("api.weights.route.update_weights", TESTS + "test_a_checkpoint_folder_is_served_under_a_new_version"),
        "mode": Planned("api.weights.route.update_weights", TESTS + "test_abort_ends_requests_in_flight_with_a_clear_error"),
    }),
])
