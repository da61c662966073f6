"""The field registry covers every field of every generated request model of a served route,
names code and a test that exist for each planned field, sends each sampling and stopping
field to the engine, and names a field a spec change adds."""

from __future__ import annotations

import importlib.util
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from api.chat.route import CHAT
from api.completions.route import COMPLETIONS
from api.core.errors import ApiError
from api.core.registry import Planned, Sampled
from api.messages.route import MESSAGES
from api.responses.route import RESPONSES
from api.server.app import API_PREFIXES, REGISTRY, create_app
from api.server.settings import Settings
from engine.host.request import SamplingParams, StopCriteria
from engine.sampling.params import VocabSize, bounds_of

ROOT = Path(__file__).resolve().parents[2]
HTTP_METHODS = ("get", "post", "put", "patch", "delete")


def spec_request_models(spec_dir: Path) -> list[tuple[str, str, str, str]]:
    """(generated module, class, method, path) of every request body the specs define: the
    OpenAPI operations' requestBody schemas and the AsyncAPI channels' published messages."""
    found = []
    for path in sorted((spec_dir / "openapi").glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        module = path.stem.replace("-", "_")
        for route, operations in document.get("paths", {}).items():
            for method in HTTP_METHODS:
                body = (operations.get(method) or {}).get("requestBody", {})
                for media in body.get("content", {}).values():
                    found.append((module, media["schema"]["$ref"].rsplit("/", 1)[-1], method, route))
    for path in sorted((spec_dir / "asyncapi").glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        messages = document.get("components", {}).get("messages", {})
        for channel, item in document.get("channels", {}).items():
            message_name = item["publish"]["message"]["$ref"].rsplit("/", 1)[-1]
            payload = messages[message_name]["payload"]
            schema = payload["$ref"].rsplit("/", 1)[-1] if "$ref" in payload else message_name
            method = item["bindings"]["http"]["method"].lower()
            found.append((path.stem.replace("-", "_"), schema, method, "/v1" + channel))
    return found


def served_routes() -> set[tuple[str, str]]:
    """(method, path) the app answers, with its API paths under /v1."""
    app = create_app(Settings(), engine_factory=lambda settings: None)  # never started
    routes = set()
    for route in app.routes:
        for method in getattr(route, "methods", ()):
            routes.add((method.lower(), re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)))
    return routes


def spec_path_pattern(path: str) -> str:
    return re.sub(r"\{\w+\}", "{}", path)


def is_served(method: str, path: str, routes) -> bool:
    wanted = spec_path_pattern(path)
    return any(m == method and spec_path_pattern(p) == wanted for m, p in routes)


REQUEST_MODELS = spec_request_models(ROOT / "spec")


def generated_class(module: str, name: str):
    return getattr(importlib.import_module(f"generated.{module}"), name)


def test_the_specs_define_the_request_models_this_test_walks():
    names = {(module, name) for module, name, _, _ in REQUEST_MODELS}
    assert ("fireworks_completions", "CompletionRequest") in names
    assert ("friendli_container_completions", "ContainerCompletionsBody") in names
    assert ("fireworks_streaming", "CompletionRequest") in names


@pytest.mark.parametrize("module, name, method, path", REQUEST_MODELS,
                         ids=[f"{m}.{n}" for m, n, _, _ in REQUEST_MODELS])
def test_every_field_of_a_served_request_model_is_handled_or_refused(module, name, method, path):
    model = generated_class(module, name)
    if not is_served(method, path, served_routes()):
        assert REGISTRY.not_served_reason(model) or not REGISTRY.unregistered_fields(model), (
            f"{method.upper()} {path} is not served: list {name} in api/server/app.py NOT_SERVED, with the reason")
        return
    assert REGISTRY.not_served_reason(model) is None, f"{name} is served: drop its NOT_SERVED entry"
    assert REGISTRY.unregistered_fields(model) == [], "decide on each: handled (by what, with its test) or refused"


def planned_entries():
    return [(key, field, decision) for key, field, decision in REGISTRY.tables() if isinstance(decision, Planned)]


def test_every_planned_field_names_a_test_that_exists():
    for model_key, field, decision in planned_entries():
        file, _, function = decision.test.partition("::")
        source = (ROOT / file).read_text() if (ROOT / file).is_file() else ""
        assert re.search(rf"^def {re.escape(function)}\(", source, re.M), f"{model_key}.{field}: no test {decision.test}"


def dialect_of(model_key: str) -> str:
    """The dialect package whose table holds `model_key` (the first one that lists it)."""
    for dialect in ("completions", "chat", "responses", "messages", "tokens", "adapters", "embeddings", "weights"):
        table = importlib.import_module(f"api.{dialect}.fields").REGISTRY
        if any(key == model_key for key, _, _ in table.tables()):
            return dialect
    raise AssertionError(f"no dialect lists {model_key}")


def resolve(dotted: str, package: str):
    """The object `module.name` names: absolute (api....) or within `package`."""
    path = dotted if dotted.startswith("api.") else f"{package}.{dotted}"
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_planned_field_names_the_code_that_handles_it():
    for model_key, field, decision in planned_entries():
        handler = resolve(decision.step, f"api.{dialect_of(model_key)}")
        assert callable(handler), f"{model_key}.{field}: {decision.step} is not a function"


def test_the_completions_route_is_served_under_both_prefixes():
    routes = served_routes()
    assert all(("post", f"{prefix}/completions") in routes for prefix in API_PREFIXES)


def test_a_field_added_to_a_spec_is_named_until_decided(tmp_path):
    """The regenerate-on-spec-change workflow: edit spec/, run codegen, this test names the field."""
    shutil.copytree(ROOT / "spec", tmp_path / "spec")
    (tmp_path / "generated").mkdir()
    spec_file = tmp_path / "spec/openapi/fireworks-completions.yaml"
    document = yaml.safe_load(spec_file.read_text())
    document["components"]["schemas"]["CompletionRequest"]["properties"]["brand_new_knob"] = {
        "type": "integer", "title": "Brand New Knob"}
    spec_file.write_text(yaml.safe_dump(document, sort_keys=False))
    subprocess.run([sys.executable, str(ROOT / "tools/codegen.py"), "--root", str(tmp_path)], check=True,
                   capture_output=True)
    module_path = tmp_path / "generated/fireworks_completions.py"
    spec = importlib.util.spec_from_file_location("regenerated.fireworks_completions", module_path)
    regenerated = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = regenerated  # pydantic resolves the module's annotations through it
    try:
        spec.loader.exec_module(regenerated)
    finally:
        del sys.modules[spec.name]

    assert REGISTRY.unregistered_fields(regenerated.CompletionRequest) == ["CompletionRequest.brand_new_knob"]
    # And a request that uses it is refused, naming it, rather than silently ignored.
    with pytest.raises(ApiError) as refused:
        REGISTRY.refuse_unsupported([regenerated.CompletionRequest], {"brand_new_knob"}, {"brand_new_knob": 3})
    assert refused.value.body.error.param == "brand_new_knob"


# Every field a dialect's table marks as a sampling or stopping parameter reaches the engine:
# sent through its route with a value of its own, it arrives in the engine Request's
# SamplingParams (or StopCriteria) attribute that the table names. The values come from the
# bounds SamplingParams and StopCriteria declare, so a new parameter is covered as soon as it
# has its declaration and its table entry.

MODEL = "SmolLM2-135M-Instruct"
ROUTES = {
    "completions": ("/v1/completions", COMPLETIONS, {"prompt": "x", "max_tokens": 2}),
    "chat": ("/v1/chat/completions", CHAT, {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                            "max_completion_tokens": 2}),
    "responses": ("/v1/responses", RESPONSES, {"model": MODEL, "input": "x", "max_output_tokens": 2}),
    "messages": ("/v1/messages", MESSAGES, {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                           "max_tokens": 2}),
}


def engine_fields(name: str) -> list[tuple[str, str, bool]]:
    """(field, attribute, is a sampling parameter) of every engine field of a dialect."""
    _, dialect, _ = ROUTES[name]
    every_field = {field for model in dialect.models for field in model.model_fields}
    found = dialect.registry.engine_fields(dialect.models, every_field)
    return sorted((field, decision.attribute or field, isinstance(decision, Sampled))
                  for field, decision in found.items())


CASES = [(name, *field) for name in ROUTES for field in engine_fields(name)]


def test_every_dialect_has_engine_fields():
    assert {name for name, *_ in CASES} == set(ROUTES)
    assert ("completions", "min_tokens", "min_tokens", False) in CASES


def distinct_value(params_cls: type, attribute: str):
    """A value in the attribute's declared bounds that is not its default."""
    default = params_cls.__dataclass_fields__[attribute].default
    bounds = bounds_of(params_cls, attribute)
    if bounds is None:  # a flag
        return not default
    high = 40 if isinstance(bounds.high, VocabSize) or math.isinf(bounds.high) else bounds.high
    value = bounds.low + (high - bounds.low) * 0.375
    value = round(value) if bounds.integer else round(value, 3)
    return value if value != default else value + (1 if bounds.integer else 0.125)


@pytest.mark.parametrize("dialect, field, attribute, sampled", CASES,
                         ids=[f"{name}.{field}" for name, field, *_ in CASES])
def test_each_engine_field_reaches_the_engine(client, engine_requests, dialect, field, attribute, sampled):
    url, _, base = ROUTES[dialect]
    params_cls = SamplingParams if sampled else StopCriteria
    value = distinct_value(params_cls, attribute)
    response = client.post(url, json={**base, field: value})
    assert response.status_code == 200, response.text
    request = engine_requests[-1]
    assert getattr(request.sampling if sampled else request.stop, attribute) == value
