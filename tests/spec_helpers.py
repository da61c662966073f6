"""Reading spec/ in tests: every spec file, its generated module, and every example in it."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import yaml

ROOT = Path(__file__).resolve().parent.parent
SPEC_FILES = sorted((ROOT / "spec").glob("*api/*.yaml"))
SCHEMA_REF_PREFIX = "#/components/schemas/"


@functools.cache
def load(spec_path: Path) -> dict:
    """The parsed spec, shared between tests: copy it before changing it."""
    return yaml.safe_load(spec_path.read_text())


def generated_module(spec_path: Path) -> ModuleType:
    return importlib.import_module(f"generated.{spec_path.stem.replace('-', '_')}")


def is_asyncapi(document: dict) -> bool:
    return "asyncapi" in document


@dataclass
class Example:
    """One example value in a spec, and the generated class it must validate against."""

    where: str  # a readable location, for failure messages
    schema_name: str  # component schema (or inline AsyncAPI message) the value belongs to
    value: Any
    field: str | None = None  # set for a property-level example

    def __str__(self) -> str:
        return self.where


def ref_name(schema: dict) -> str | None:
    ref = schema.get("$ref", "") if isinstance(schema, dict) else ""
    return ref.removeprefix(SCHEMA_REF_PREFIX) if ref.startswith(SCHEMA_REF_PREFIX) else None


def schema_examples(name: str, schema: dict) -> Iterator[Example]:
    """Examples on a component schema and on each of its properties."""
    for index, value in enumerate(schema.get("examples") or []):
        yield Example(f"schemas.{name}.examples[{index}]", name, value)
    if "example" in schema:
        yield Example(f"schemas.{name}.example", name, schema["example"])
    for prop, prop_schema in (schema.get("properties") or {}).items():
        if isinstance(prop_schema, dict):
            for index, value in enumerate(prop_schema.get("examples") or []):
                yield Example(f"schemas.{name}.{prop}.examples[{index}]", name, value, field=prop)


def media_examples(document: dict) -> Iterator[Example]:
    """Examples given beside a request or response body whose schema is a component."""
    for path, operations in (document.get("paths") or {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict):
                continue
            bodies = [("requestBody", operation.get("requestBody") or {})]
            bodies += [(f"responses.{code}", r) for code, r in (operation.get("responses") or {}).items()]
            for label, body in bodies:
                for media_type, media in (body.get("content") or {}).items():
                    name = ref_name(media.get("schema") or {})
                    if name is None:
                        continue
                    where = f"paths.{path}.{method}.{label}.{media_type}"
                    if "example" in media:
                        yield Example(f"{where}.example", name, media["example"])
                    for key, example in (media.get("examples") or {}).items():
                        yield Example(f"{where}.examples.{key}", name, example["value"])


def message_examples(document: dict) -> Iterator[Example]:
    """AsyncAPI message examples, validated against the message's payload."""
    for message_name, message in document["components"].get("messages", {}).items():
        name = ref_name(message["payload"]) or message_name
        for index, example in enumerate(message.get("examples") or []):
            yield Example(f"messages.{message_name}.examples[{index}]", name, example["payload"])


def all_examples(spec_path: Path) -> list[Example]:
    document = load(spec_path)
    schemas = document.get("components", {}).get("schemas", {})
    examples = [e for name, schema in schemas.items() for e in schema_examples(name, schema)]
    if is_asyncapi(document):
        examples += message_examples(document)
    else:
        examples += media_examples(document)
    return examples
