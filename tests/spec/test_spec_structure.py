"""Each spec file is structurally valid: OpenAPI by openapi-spec-validator, AsyncAPI by its refs."""

from __future__ import annotations

import copy

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from spec_helpers import SPEC_FILES, is_asyncapi, load

OPENAPI = [p for p in SPEC_FILES if not is_asyncapi(load(p))]
ASYNCAPI = [p for p in SPEC_FILES if is_asyncapi(load(p))]
EXPECTED = {
    "openapi/fireworks-completions.yaml", "openapi/friendli-container-completions.yaml",
    "openapi/friendli-serverless-completions.yaml", "openapi/openai-chat-completions.yaml",
    "openapi/flint.yaml", "asyncapi/fireworks-streaming.yaml",
}


def test_every_spec_file_is_present():
    assert {f"{p.parent.name}/{p.name}" for p in SPEC_FILES} == EXPECTED


@pytest.mark.parametrize("spec_path", OPENAPI, ids=lambda p: p.stem)
def test_openapi_document_is_valid(spec_path):
    document = load(spec_path)
    assert document["openapi"].startswith("3.1")
    validate(document)


def test_the_validator_rejects_the_uncorrected_friendli_mapping():
    """The correction listed atop the Friendli spec is needed: the seed's form fails."""
    spec_path = next(p for p in OPENAPI if p.stem == "friendli-container-completions")
    document = copy.deepcopy(load(spec_path))
    mapping = document["components"]["schemas"]["ResponseFormat"]["discriminator"]["mapping"]
    for key, target in mapping.items():
        mapping[key] = {"$ref": target}
    with pytest.raises(OpenAPIValidationError):
        validate(document)


def references(node, trail=""):
    """Every ($ref value, location) pair in a document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value, trail
            else:
                yield from references(value, f"{trail}/{key}")
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from references(item, f"{trail}/{index}")


def resolve(document, ref: str):
    assert ref.startswith("#/"), f"only local references are expected, got {ref}"
    node = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


@pytest.mark.parametrize("spec_path", ASYNCAPI, ids=lambda p: p.stem)
def test_asyncapi_references_resolve(spec_path):
    document = load(spec_path)
    assert document["asyncapi"] == "2.6.0"
    refs = list(references(document))
    assert refs, "an AsyncAPI document without references tests nothing"
    unresolved = []
    for ref, where in refs:
        try:
            resolve(document, ref)
        except (KeyError, TypeError, AssertionError):
            unresolved.append(f"{where}: {ref}")
    assert not unresolved, unresolved


@pytest.mark.parametrize("spec_path", ASYNCAPI, ids=lambda p: p.stem)
def test_asyncapi_channels_carry_messages(spec_path):
    document = load(spec_path)
    for name, channel in document["channels"].items():
        operations = [channel[op] for op in ("publish", "subscribe") if op in channel]
        assert operations, f"channel {name} has no operation"
        for operation in operations:
            assert "message" in operation, f"channel {name} has an operation without a message"


def test_asyncapi_perf_metrics_is_closed_with_seed_000_names():
    spec_path = ASYNCAPI[0]
    metrics = load(spec_path)["components"]["schemas"]["PerfMetrics"]["properties"]
    for name in ("speculation-prompt-matched-tokens", "speculation-generated-tokens",
                 "backend-host", "num-concurrent-requests", "generation-duration"):
        assert metrics[name].get("type"), name
