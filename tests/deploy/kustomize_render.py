"""deploy/'s kustomizations rendered in Python, so the tests need no kustomize binary.

Only what deploy/ uses is implemented: `resources` (files and directories), `images`,
`patches` that are JSON patches (RFC 6902) with a target, and `configMapGenerator` entries
made of `files` (named with kustomize's content hash, and the pod templates' references to
them renamed to match). A kustomization using anything else is refused (KUSTOMIZATION_KEYS),
and test_manifests compares the result with `kubectl kustomize` where kubectl is installed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml

KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "images", "patches", "configMapGenerator"}
PATCH_KEYS = {"path", "target"}
TARGET_KEYS = {"kind", "name"}
GENERATOR_KEYS = {"name", "files"}


def load_documents(path: Path) -> list[dict]:
    """Every non-empty YAML document in the file."""
    with path.open() as file:
        return [document for document in yaml.safe_load_all(file) if document]


def kustomization_of(directory: Path) -> dict:
    (kustomization,) = load_documents(directory / "kustomization.yaml")
    unknown = set(kustomization) - KUSTOMIZATION_KEYS
    assert not unknown, f"{directory}/kustomization.yaml uses {sorted(unknown)}, which the tests' renderer lacks"
    return kustomization


def render(directory: Path) -> list[dict]:
    """The documents `kubectl kustomize directory` prints, in resource order."""
    kustomization = kustomization_of(directory)
    documents: list[dict] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        documents += render(path) if path.is_dir() else load_documents(path)
    for generator in kustomization.get("configMapGenerator", []):
        config_map = generate_config_map(directory, generator)
        rename_config_map(documents, generator["name"], config_map["metadata"]["name"])
        documents.append(config_map)
    for patch in kustomization.get("patches", []):
        apply_patch(documents, directory, patch)
    for image in kustomization.get("images", []):
        set_image(documents, image)
    return documents


def referenced_files(directory: Path) -> set[Path]:
    """The kustomization file and every file it names, resolved."""
    kustomization = kustomization_of(directory)
    files = {(directory / "kustomization.yaml").resolve()}
    files |= {(directory / entry).resolve() for entry in kustomization.get("resources", [])}
    files |= {(directory / patch["path"]).resolve() for patch in kustomization.get("patches", [])}
    files |= {(directory / file).resolve() for generator in kustomization.get("configMapGenerator", [])
              for file in generator["files"]}
    return files


def generate_config_map(directory: Path, generator: dict) -> dict:
    """kustomize's configMapGenerator: one key per file (its name), the file's text as the
    value, and the name suffixed with the hash of the whole, so that a changed file is a new
    ConfigMap and the pods that mount it are replaced."""
    assert set(generator) <= GENERATOR_KEYS, f"unsupported configMapGenerator entry {generator}"
    data = {}
    for file in generator["files"]:
        assert "=" not in file, f"{file}: the tests' renderer lacks key=path file entries"
        data[Path(file).name] = (directory / file).read_text()
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{generator['name']}-{content_hash(data)}"}, "data": data}


def content_hash(data: dict[str, str]) -> str:
    """kustomize's name suffix for a ConfigMap (api/hasher): the SHA-256 of the JSON of its
    kind, name and data as Go encodes it (keys sorted, no spaces, <, > and & escaped), its
    first ten hex digits with the vowels and the digits that could spell words replaced. The
    name hashed is always "": kustomize looks it up as one field called "metadata/name"."""
    encoded = json.dumps({"kind": "ConfigMap", "name": "", "data": data}, sort_keys=True, separators=(",", ":"),
                         ensure_ascii=False)
    for character, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        encoded = encoded.replace(character, escape)
    digest = hashlib.sha256(encoded.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans({"0": "g", "1": "h", "3": "k", "a": "m", "e": "t"}))


def rename_config_map(documents: list[dict], old: str, new: str) -> None:
    """Point the Deployments' references to ConfigMap `old` (volumes, env, envFrom) at `new`."""
    for document in documents:
        if document.get("kind") != "Deployment":
            continue
        spec = document["spec"]["template"]["spec"]
        references = [volume["configMap"] for volume in spec.get("volumes", []) if "configMap" in volume]
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            references += [variable["valueFrom"]["configMapKeyRef"] for variable in container.get("env", [])
                           if "configMapKeyRef" in variable.get("valueFrom", {})]
            references += [source["configMapRef"] for source in container.get("envFrom", [])
                           if "configMapRef" in source]
        for reference in references:
            if reference.get("name") == old:
                reference["name"] = new


def apply_patch(documents: list[dict], directory: Path, patch: dict) -> None:
    assert set(patch) <= PATCH_KEYS and set(patch["target"]) <= TARGET_KEYS, f"unsupported patch entry {patch}"
    (operations,) = load_documents(directory / patch["path"])
    assert isinstance(operations, list), f"{patch['path']}: only JSON patches (a list of operations) are rendered"
    targets = [document for document in documents if is_target(document, patch["target"])]
    assert targets, f"{patch['path']}: its target {patch['target']} matches no resource"
    for document in targets:
        for operation in operations:
            apply_operation(document, operation, patch["path"])


def is_target(document: dict, target: dict) -> bool:
    found = {"kind": document.get("kind"), "name": document["metadata"]["name"]}
    return all(found[key] == value for key, value in target.items())


def apply_operation(document: dict, operation: dict, source: str) -> None:
    """One RFC 6902 add, replace or remove; a path that is not there fails, as in kustomize."""
    op, path = operation["op"], operation["path"]
    assert op in ("add", "replace", "remove"), f"{source}: {op} {path}: the tests' renderer lacks {op}"
    *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in path.lstrip("/").split("/")]
    node = document
    try:
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
    except (KeyError, IndexError) as error:
        raise AssertionError(f"{source}: {op} {path}: no {error} in the target") from None
    if isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        highest = len(node) if op == "add" else len(node) - 1  # add may append
        assert 0 <= index <= highest, f"{source}: {op} {path}: no such list index"
        if op == "add":
            node.insert(index, operation["value"])
        elif op == "replace":
            node[index] = operation["value"]
        else:
            del node[index]
        return
    assert op == "add" or last in node, f"{source}: {op} {path}: nothing there to {op}"
    if op == "remove":
        del node[last]
    else:
        node[last] = operation["value"]


def set_image(documents: list[dict], image: dict) -> None:
    """kustomize's `images`: a new name or tag for every container running `image["name"]`."""
    for document in documents:
        for container in containers_in(document):
            name, _, tag = container["image"].partition(":")
            if name == image["name"]:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


def containers_in(document: dict) -> list[dict]:
    """The containers of a Deployment's pod template (the only kind deploy/ retags)."""
    if document.get("kind") != "Deployment":
        return []
    return document["spec"]["template"]["spec"]["containers"]
