"""generated/ holds a model for every schema, and every example in spec/ validates against it."""

from __future__ import annotations

import copy
from enum import Enum

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from spec_helpers import SPEC_FILES, Example, all_examples, generated_module, load

EXAMPLES = [(path, example) for path in SPEC_FILES for example in all_examples(path)]


def example_id(item) -> str:
    path, example = item if isinstance(item, tuple) else (None, item)
    return f"{path.stem}:{example}" if path else str(item)


def model_class(spec_path, schema_name: str) -> type[BaseModel]:
    return getattr(generated_module(spec_path), schema_name)


def field_adapter(model: type[BaseModel], property_name: str) -> TypeAdapter:
    """The pydantic type of the field that carries a spec property (by alias or name)."""
    for name, info in model.model_fields.items():
        if property_name in (name, info.alias):
            return TypeAdapter(info.annotation)
    raise AssertionError(f"{model.__name__} has no field for property {property_name}")


def validate(spec_path, example: Example):
    model = model_class(spec_path, example.schema_name)
    if example.field is not None:
        return field_adapter(model, example.field).validate_python(example.value)
    return model.model_validate(example.value)


@pytest.mark.parametrize("spec_path", SPEC_FILES, ids=lambda p: p.stem)
def test_every_schema_has_a_generated_model(spec_path):
    document = load(spec_path)
    module = generated_module(spec_path)
    schemas = document.get("components", {}).get("schemas", {})
    assert schemas, f"{spec_path.name} defines no schemas"
    missing = [name for name in schemas if not is_model_class(getattr(module, name, None))]
    assert not missing, f"{spec_path.name}: no generated class for {missing}"


def is_model_class(candidate) -> bool:
    """A pydantic model, or an enum for a schema that is only a list of values."""
    return isinstance(candidate, type) and issubclass(candidate, (BaseModel, Enum))


def test_specs_carry_examples():
    """The examples below are the ones the issue names; losing them would hollow the tests."""
    where = {f"{path.stem}:{example}" for path, example in EXAMPLES}
    assert any(w.startswith("friendli-container-completions:paths./v1/completions.post.responses.200") for w in where)
    assert any(w.startswith("fireworks-streaming:messages.ChatCompletionChunk.examples") for w in where)


@pytest.mark.parametrize("item", EXAMPLES, ids=example_id)
def test_example_validates(item):
    spec_path, example = item
    validate(spec_path, example)


def object_examples():
    return [(p, e) for p, e in EXAMPLES if e.field is None and isinstance(e.value, dict)]


@pytest.mark.parametrize("item", object_examples(), ids=example_id)
def test_example_of_the_wrong_type_is_rejected(item):
    spec_path, example = item
    with pytest.raises(ValidationError):
        validate(spec_path, Example(example.where, example.schema_name, [example.value]))


def required_fields(spec_path, schema_name: str) -> list[str]:
    schemas = load(spec_path)["components"]["schemas"]
    schema = schemas.get(schema_name, {})
    while "$ref" in schema:  # an alias of another component
        schema = schemas[schema["$ref"].rsplit("/", 1)[-1]]
    return schema.get("required", [])


def examples_with_required_fields():
    return [
        (path, example, field)
        for path, example in object_examples()
        for field in required_fields(path, example.schema_name)
        if field in example.value
    ]


@pytest.mark.parametrize("item", examples_with_required_fields(), ids=lambda i: f"{example_id(i[:2])}-{i[2]}")
def test_example_missing_a_required_field_is_rejected(item):
    spec_path, example, field = item
    broken = {key: value for key, value in example.value.items() if key != field}
    with pytest.raises(ValidationError):
        validate(spec_path, Example(example.where, example.schema_name, broken))


def spec(stem):
    return next(path for path in SPEC_FILES if path.stem == stem)


def friendli_success_example() -> dict:
    path = spec("friendli-container-completions")
    return next(e.value for e in all_examples(path) if ".responses.200." in e.where)


def test_friendli_success_example_round_trips():
    module = generated_module(spec("friendli-container-completions"))
    result = module.ContainerCompletionsSuccess.model_validate(friendli_success_example())
    dumped = result.model_dump(mode="json", exclude_none=True)
    assert dumped["choices"][0]["tokens"] == friendli_success_example()["choices"][0]["tokens"]


@pytest.mark.parametrize("corrupt", [
    lambda body: body["choices"][0].__setitem__("tokens", ["not", "ids"]),
    lambda body: body["choices"][0].__setitem__("finish_reason", "exploded"),
    lambda body: body.__setitem__("usage", {"prompt_tokens": "seven"}),
])
def test_malformed_friendli_success_is_rejected(corrupt):
    module = generated_module(spec("friendli-container-completions"))
    body = copy.deepcopy(friendli_success_example())
    corrupt(body)
    with pytest.raises(ValidationError):
        module.ContainerCompletionsSuccess.model_validate(body)


def test_done_terminator():
    stream_done = generated_module(spec("fireworks-streaming")).StreamDone
    assert stream_done.model_validate("[DONE]").root == "[DONE]"
    for wrong in ("[done]", "DONE", "", None, {"data": "[DONE]"}):
        with pytest.raises(ValidationError):
            stream_done.model_validate(wrong)


def test_chat_chunk_example_is_a_stream_message():
    """The root of the AsyncAPI module accepts any payload on its channels, chunk included."""
    path = spec("fireworks-streaming")
    module = generated_module(path)
    chunk = next(e.value for e in all_examples(path) if "ChatCompletionChunk" in e.where)
    parsed = module.ChatCompletionStreamResponse.model_validate(chunk)
    assert parsed.choices[0].delta.content == "Hello"
    broken = copy.deepcopy(chunk)
    broken["choices"] = "Hello"
    with pytest.raises(ValidationError):
        module.ChatCompletionStreamResponse.model_validate(broken)
