"""GET /openapi.json: the contract made from spec/, listing exactly the routes the app serves,
self-contained, and a valid OpenAPI 3.1 document (api/openapi/contract.py)."""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Any, Iterator

import pytest
import yaml
from litestar.testing import TestClient
from openapi_spec_validator import OpenAPIV31SpecValidator

from api.completions.body import CompletionsBody
from api.openapi.specs import load_specs, operations
from api.server.app import create_app
from api.server.settings import Settings


@pytest.fixture(scope="module")
def app():
    return create_app(Settings())  # the embedded model, never loaded: the document needs no engine


@pytest.fixture(scope="module")
def document(app) -> dict[str, Any]:
    # Without the context manager the lifespan never runs: the server is still starting.
    response = TestClient(app=app).get("/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    return response.json()


def template(path: str) -> str:
    """/v1/models/{model_id:str} and /v1/models/{model} -> /v1/models/{}."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def served_operations(app) -> set[tuple[str, str]]:
    return {(method.lower(), template(route.path)) for route in app.routes
            for method in route.methods - {"HEAD", "OPTIONS"}}


def listed_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, template(path)) for path, item in document["paths"].items() for method, _ in operations(item)}


def test_the_document_is_openapi_3_1_about_flint(document):
    assert document["openapi"].startswith("3.1")
    assert document["info"]["title"] == "Flint" and document["info"]["version"] == version("flint")


def test_it_validates_as_an_openapi_3_1_document(document):
    OpenAPIV31SpecValidator(document).validate()  # raises on the first error


def test_every_served_operation_is_listed_and_nothing_else(app, document):
    served, listed = served_operations(app), listed_operations(document)
    assert served - listed == set(), "served but not in the contract"
    assert listed - served == set(), "in the contract but not served"
    assert ("post", "/inference/v1/chat/completions") in listed and ("post", "/serverless/v1/completions") in listed


def test_litestar_schema_pages_are_off(app):
    assert not any(route.path.startswith("/schema") for route in app.routes)


def refs(value: Any) -> Iterator[str]:
    """Every reference in `value`: `$ref`s and discriminator mappings."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref" or key == "mapping":
                yield from [item] if isinstance(item, str) else item.values()
            else:
                yield from refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from refs(item)


def test_every_reference_resolves_inside_the_document(document):
    found = set(refs(document))
    assert len(found) > 300
    for ref in found:
        assert ref.startswith("#/"), ref
        node = document
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]  # KeyError names a dangling reference


def test_names_the_specs_define_differently_are_renamed_with_their_references(document):
    schemas = document["components"]["schemas"]
    assert "ResponseFormat" not in schemas
    fireworks = schemas["FireworksCompletionsResponseFormat"]
    friendli = schemas["FriendliContainerCompletionsResponseFormat"]
    assert fireworks != friendli
    # Friendli's discriminator mapping follows its renamed variants.
    text = "#/components/schemas/FriendliContainerCompletionsResponseFormatText"
    assert text in friendli["discriminator"]["mapping"].values()
    assert "FlintErrorResponse" in schemas and "OpenaiChatCompletionsErrorResponse" in schemas
    assert "ModelList" in schemas  # defined once: the generated class's name


def test_clashes_are_found_again_after_a_rename(tmp_path):
    """Identical definitions referring to names that clash become different once renamed."""
    thing = lambda kind: {"type": "object", "properties": {"kind": {"type": "string", "const": kind}}}
    for stem, kind in (("a", "x"), ("b", "y")):
        (tmp_path / f"{stem}.yaml").write_text(yaml.safe_dump({"openapi": "3.1.0", "components": {"schemas": {
            "Thing": thing(kind), "Holder": {"$ref": "#/components/schemas/Thing"}}}}))
    specs = load_specs(tmp_path)
    assert set(specs.components["schemas"]) == {"AThing", "BThing", "AHolder", "BHolder"}
    assert specs.components["schemas"]["BHolder"] == {"$ref": "#/components/schemas/BThing"}


def test_the_completions_body_lists_the_fields_the_parser_accepts(document):
    body = document["components"]["schemas"]["FlintCompletionsBody"]
    assert set(body["properties"]) == set(CompletionsBody.model_fields)
    assert body["additionalProperties"] is False


def error_schema(document: dict[str, Any], path: str, method: str, status: str) -> dict[str, Any]:
    response = document["paths"][path][method]["responses"][status]
    if "$ref" in response:
        response = document["components"]["responses"][response["$ref"].rsplit("/", 1)[-1]]
    return response["content"]["application/json"]["schema"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_a_generation_lists_the_errors_flint_answers_in_its_dialects_shape(document, path):
    responses = document["paths"][path]["post"]["responses"]
    for status in ("400", "401", "404", "413", "429", "503"):
        assert status in responses or f"{status[0]}XX" in responses, (path, status)
    status = "4XX" if "4XX" in responses else "400"
    expected = "AnthropicErrorResponse" if path == "/v1/messages" else "ErrorResponse"
    assert error_schema(document, path, "post", status)["$ref"].endswith(expected)


def test_a_completions_schema_error_is_fireworks_422_with_openai_error(document):
    schema = error_schema(document, "/v1/completions", "post", "422")
    parts = [part["$ref"].rsplit("/", 1)[-1] for part in schema["allOf"]]
    assert parts == ["HTTPValidationError", "FlintErrorResponse"]


def test_open_routes_need_no_key_and_list_no_api_errors(document):
    for path in ("/health", "/metrics", "/openapi.json"):
        operation = document["paths"][path]["get"]
        assert operation["security"] == [] and "401" not in operation["responses"]
