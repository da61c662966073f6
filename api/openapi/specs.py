"""The spec/openapi documents, read once and their components gathered into one namespace,
for the contract Flint serves (api/openapi/contract.py).

Each vendor document names its components in its own namespace, and some names mean
different things in different documents (`ResponseFormat` is Fireworks' one object and
Friendli's discriminated union; `ErrorResponse` is Flint's and the chat spec's, which
requires `param` and `code`). A name that two documents define differently is renamed in
every document that defines it, with the document's prefix (`FireworksCompletions` +
`ResponseFormat`), and that document's references follow it; a name defined once, or the
same everywhere, keeps its name, which is the generated/ class name. Renaming changes what
another definition refers to, so clashes are sought again until none is left.

Security schemes are not gathered: the vendors' schemes describe their clouds' keys, and
Flint's one key is described by api/openapi/contract.py.

spec/ sits beside api/ in the checkout that `pip install -e .` serves from.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec" / "openapi"
COMPONENT_KINDS = ("schemas", "parameters", "responses")
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
Renames = dict[tuple[str, str, str], str]  # (document, kind, name) -> the merged name


@dataclass(frozen=True)
class Specs:
    documents: dict[str, dict[str, Any]]  # file stem -> the document, its references renamed
    components: dict[str, dict[str, Any]]  # kind -> merged name -> definition
    renames: Renames

    def name(self, document: str, name: str, kind: str = "schemas") -> str:
        """The merged name of `document`'s component `name`."""
        return self.renames.get((document, kind, name), name)

    def ref(self, document: str, name: str, kind: str = "schemas") -> str:
        return f"#/components/{kind}/{self.name(document, name, kind)}"

    def schema(self, document: str, name: str) -> dict[str, Any]:
        """A copy of `document`'s schema `name`, its references renamed."""
        return copy.deepcopy(self.components["schemas"][self.name(document, name)])


def operations(path_item: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(method, operation) of a path item, without its other keys (parameters, servers)."""
    return [(method, path_item[method]) for method in HTTP_METHODS if method in path_item]


def load_specs(spec_dir: Path = SPEC_DIR) -> Specs:
    """Every OpenAPI document of `spec_dir`, with its components merged."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's loader is several times faster
    originals = {path.stem: yaml.load(path.read_text(), Loader=loader) for path in sorted(spec_dir.glob("*.yaml"))}
    renames: Renames = {}
    while True:
        documents = {stem: renamed(stem, document, renames) for stem, document in originals.items()}
        clashes = clashing_names(documents, renames)
        if not clashes:
            return Specs(documents, merged_components(documents), renames)
        renames |= clashes


def prefix(stem: str) -> str:
    """friendli-container-completions -> FriendliContainerCompletions."""
    return "".join(part.capitalize() for part in stem.split("-"))


def renamed(stem: str, document: dict[str, Any], renames: Renames) -> dict[str, Any]:
    """`document` with its components' names and its references to them renamed."""
    targets = {f"#/components/{kind}/{name}": f"#/components/{kind}/{new}"
               for (owner, kind, name), new in renames.items() if owner == stem}
    document = rewrite_refs(document, targets)
    components = document.get("components", {})
    for kind in COMPONENT_KINDS:
        if kind in components:
            components[kind] = {renames.get((stem, kind, name), name): definition
                                for name, definition in components[kind].items()}
    return document


def rewrite_refs(value: Any, targets: dict[str, str]) -> Any:
    """A copy of `value` whose reference strings found in `targets` are replaced: `$ref`s
    and discriminator mappings alike (no other string is a whole `#/components/...` path)."""
    if isinstance(value, dict):
        return {key: rewrite_refs(item, targets) for key, item in value.items()}
    if isinstance(value, list):
        return [rewrite_refs(item, targets) for item in value]
    return targets.get(value, value) if isinstance(value, str) else value


def clashing_names(documents: dict[str, dict], renames: Renames) -> Renames:
    """The new names for the components that several documents define differently."""
    definitions: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)  # (kind, name) -> stem -> JSON
    for stem, document in documents.items():
        for kind in COMPONENT_KINDS:
            for name, definition in document.get("components", {}).get(kind, {}).items():
                definitions[kind, name][stem] = json.dumps(definition, sort_keys=True)
    originals = {(stem, kind, new): old for (stem, kind, old), new in renames.items()}
    clashes: Renames = {}
    for (kind, name), by_stem in definitions.items():
        if len(set(by_stem.values())) > 1:
            for stem in by_stem:
                original = originals.get((stem, kind, name), name)
                clashes[stem, kind, original] = prefix(stem) + name
    return clashes


def merged_components(documents: dict[str, dict]) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {kind: {} for kind in COMPONENT_KINDS}
    for document in documents.values():
        for kind in COMPONENT_KINDS:
            merged[kind].update(document.get("components", {}).get(kind, {}))
    return merged
