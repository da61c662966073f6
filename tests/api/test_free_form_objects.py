"""Free-form JSON Schema objects pass validation with any keys (the generated models allow
them), while unknown fields anywhere else are still schema errors. The bodies are the ones
the `openai` SDK builds from a pydantic model for tools and for response formats."""

from __future__ import annotations

import openai
import pytest
from openai.lib._parsing._completions import type_to_response_format_param
from pydantic import BaseModel

from api.chat.body import parse
from api.core.errors import RequestValidationError


class Lookup(BaseModel):
    city: str
    days: list[int]


def canonical_body() -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [openai.pydantic_function_tool(Lookup)],
            "response_format": type_to_response_format_param(Lookup)}


def test_the_sdks_tools_and_json_schema_bodies_validate_with_every_schema_key():
    body = parse(canonical_body())
    parameters = body.tools[0].root.function.parameters.model_dump()
    assert parameters == openai.pydantic_function_tool(Lookup)["function"]["parameters"]
    schema = body.response_format.root.json_schema.schema_.model_dump()
    assert schema["additionalProperties"] is False and schema["required"] == ["city", "days"]


@pytest.mark.parametrize("path", [["tools", 0, "function"], ["response_format", "json_schema"], []])
def test_unknown_fields_outside_schemas_are_still_refused(path):
    raw = canonical_body()
    node = raw
    for key in path:
        node = node[key]
    node["unexpected"] = 1
    with pytest.raises(RequestValidationError) as error:
        parse(raw)
    assert error.value.errors[0]["loc"] == ["body", *path, "unexpected"]
    assert error.value.errors[0]["type"] == "extra_forbidden"
