"""Model families behind one registry keyed by architecture.

Each family module (llama.py, qwen.py, mistral.py, gemma.py, moe.py) declares a `Family`
(engine/models/family.py): its forward pass, its ModelConfig features from config.json and
GGUF metadata, its tensor names and its weight specs. The runner builds
`family_of(config).decoder`; the Hugging Face and GGUF loaders find a checkpoint's family
with `family_for_hf` and `family_for_gguf`. Adding a family is a module and a line in
FAMILIES (docs/ARCHITECTURE.md, "Adding a model family").
"""

from __future__ import annotations

from engine.config import ModelConfig
from engine.models.family import Family
from engine.models.gemma import GEMMA_FAMILIES
from engine.models.llama import LLAMA
from engine.models.mistral import MISTRAL
from engine.models.moe import MIXTRAL, QWEN3_MOE
from engine.models.qwen import QWEN2, QWEN3

FAMILIES: tuple[Family, ...] = (LLAMA, MISTRAL, QWEN2, QWEN3, *GEMMA_FAMILIES, QWEN3_MOE, MIXTRAL)


def family_named(name: str) -> Family:
    for family in FAMILIES:
        if family.name == name:
            return family
    raise ValueError(f"unknown model family {name!r}; Flint runs {', '.join(f.name for f in FAMILIES)}")


def family_of(config: ModelConfig) -> Family:
    return family_named(config.family)


def family_for_hf(architectures: list[str]) -> tuple[Family, str]:
    """The family serving the first of config.json's `architectures` that one serves, and
    that architecture's name."""
    for architecture in architectures:
        for family in FAMILIES:
            if architecture in family.hf_architectures:
                return family, architecture
    served = ", ".join(name for family in FAMILIES for name in family.hf_architectures)
    raise ValueError(f"unsupported architecture {', '.join(architectures) or '(none named in config.json)'}; "
                     f"Flint runs {served}")


def family_for_gguf(architecture: str, experts: bool = False) -> Family:
    """The family serving GGUF `general.architecture` `architecture`, with experts or not
    (llama.cpp writes Mixtral as a llama with an expert count)."""
    for family in FAMILIES:
        if architecture in family.gguf_architectures and family.moe == experts:
            return family
    served = ", ".join(name for family in FAMILIES for name in family.gguf_architectures)
    raise ValueError(f"unsupported GGUF architecture {architecture!r}; Flint runs {served}")
