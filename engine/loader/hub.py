"""Models named by Hugging Face repo id, found in the local Hugging Face cache.

`flint serve --model Qwen/Qwen3-0.6B` serves the snapshot that `huggingface_hub` (and so
`huggingface-cli download`, transformers, vLLM) keeps under `HF_HUB_CACHE` (default
`HF_HOME/hub`, `~/.cache/huggingface/hub`). The cache's layout is huggingface_hub's to
read: the snapshot comes from `snapshot_download(..., local_files_only=True)`, which needs
no network and fails when the repo is not cached. Downloading is explicit (`--download`).

`ORG/NAME/FILE.gguf` names one GGUF file of a repo that holds several.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
# What a download fetches of a Hugging Face checkpoint repo: not its other formats.
CHECKPOINT_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.jinja", "*.txt"]


def split_repo_id(model: str) -> tuple[str, str | None] | None:
    """(repo id, GGUF file name or None) when `model` reads as a repo id, else None."""
    parts = model.split("/")
    if len(parts) >= 3 and model.endswith(".gguf") and REPO_ID.match("/".join(parts[:2])):
        return "/".join(parts[:2]), "/".join(parts[2:])
    return (model, None) if REPO_ID.match(model) else None


def cached_model(repo_id: str, filename: str | None, download: bool = False) -> Path:
    """The local path of `repo_id`'s checkpoint directory (or of its GGUF `filename`),
    from the Hugging Face cache; fetched first where `download`. A model that is not
    cached, without `download`, is a LookupError saying how to get it."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    patterns = [filename] if filename else CHECKPOINT_FILES
    try:
        snapshot = Path(snapshot_download(repo_id, allow_patterns=patterns, local_files_only=not download))
    except LocalEntryNotFoundError as error:
        raise LookupError(
            f"{repo_id} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}): add --download to fetch it, "
            f"or run `hf download {repo_id}` first") from error
    except Exception as error:  # a download that failed: the network, a gated or missing repo
        raise LookupError(f"{repo_id}: {error}") from error
    path = snapshot / filename if filename else snapshot
    if not path.exists():
        raise LookupError(f"{repo_id} is cached at {snapshot} without {filename}")
    return path
