"""Checking values against the contract the server serves at /openapi.json (api/openapi/contract.py)."""

from __future__ import annotations

from typing import Any

import jsonschema
import referencing
from referencing.jsonschema import DRAFT202012


def contract_validator(document: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A validator of `schema` (a `$ref` into `document`, or a schema whose references are)."""
    resource = referencing.Resource.from_contents(document, default_specification=DRAFT202012)
    registry = referencing.Registry().with_resource("urn:contract", resource)
    rooted = {"$ref": "urn:contract" + schema["$ref"]} if "$ref" in schema else schema
    return jsonschema.Draft202012Validator(rooted, registry=registry)


def schema_errors(document: dict[str, Any], schema: dict[str, Any], value: Any) -> list[str]:
    """Where and how `value` breaks `schema`, one line per violation (none when it conforms)."""
    return [f"{list(error.absolute_path)}: {error.message[:300]}"
            for error in contract_validator(document, schema).iter_errors(value)]
