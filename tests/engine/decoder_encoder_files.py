"""Tiny random decoder checkpoints served as encoders (engine/loader/decoder_encoder.py), and
their references from the independent NumPy forward (tests/numpy_reference.py).

- An embedder shaped as Qwen3-Embedding: a Qwen3 whose tokenizer appends `<|endoftext|>` to
  every text, pooled at that last token and normalised (modules.json), optionally saved as
  the bare model saves it (`Qwen3Model`: no `model.` prefix, no head).
- A reranker shaped as Qwen3-Reranker: a Qwen3 causal LM with "no" and "yes" tokens, read
  through Qwen3-Reranker's prompt, spelled out here from its model card.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tokenizers
from numpy_reference import final_hidden, forward
from qwen3_tiny import qwen3_tokenizer_json
from safetensors.numpy import save_file

from engine.config import ModelConfig
from engine.models.params import random_params
from loader_files import hf_config_json, hf_tensors, write_hf

MERGES = {"n o": "no", "y e": "ye", "ye s": "yes"}  # "no" and "yes" as single tokens


def tokenizer_json(append_end: bool) -> str:
    """The tiny Qwen3 vocabulary, with "no" and "yes" merged; `append_end`: a post-processor
    putting `<|endoftext|>` after every text, as Qwen3-Embedding's does."""
    document = json.loads(qwen3_tokenizer_json())
    model = document["model"]
    # The merged words follow the bytes (a model's vocabulary has no gaps), the added tokens them.
    for word in MERGES.values():
        model["vocab"][word] = len(model["vocab"])
    for token in document["added_tokens"]:
        token["id"] += len(MERGES)
    model["merges"] = list(MERGES)
    if append_end:
        end = next(token["id"] for token in document["added_tokens"] if token["content"] == "<|endoftext|>")
        document["post_processor"] = {
            "type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                                     {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [end], "tokens": ["<|endoftext|>"]}}}
    return json.dumps(document)


def tiny_config(vocab_size: int, max_positions: int, tied: bool) -> ModelConfig:
    return ModelConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                       num_kv_heads=2, head_dim=16, qk_norm=True, family="qwen3", max_position_embeddings=max_positions,
                       tie_word_embeddings=tied, eos_token_ids=(vocab_size - 1,))


def write_tokenizer(folder: Path, append_end: bool) -> tokenizers.Tokenizer:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(tokenizer_json(append_end))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))
    return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))


def write_decoder_embedder(folder: Path, seed: int = 0, bare: bool = False,
                           pooling: str = "pooling_mode_lasttoken") -> tuple[ModelConfig, dict, tokenizers.Tokenizer]:
    """A Qwen3-Embedding-shaped checkpoint: its config, weights and tokenizer."""
    tokenizer = write_tokenizer(folder, append_end=True)
    config = tiny_config(tokenizer.get_vocab_size(), 64, tied=True)
    params = random_params(config, seed)
    if bare:  # as Qwen3Model saves itself
        document = {**hf_config_json(config, "qwen3"), "architectures": ["Qwen3Model"]}
        (folder / "config.json").write_text(json.dumps(document))
        save_file({name.removeprefix("model."): np.ascontiguousarray(array)
                   for name, array in hf_tensors(config, params).items() if name != "lm_head.weight"},
                  folder / "model.safetensors")
    else:
        write_hf(folder, config, params, "qwen3")
    stage = "sentence_transformers.models."
    modules = [{"idx": 0, "name": "0", "path": "", "type": stage + "Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": stage + "Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": stage + "Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, pooling: True}))
    return config, params, tokenizer


def write_decoder_reranker(folder: Path, seed: int = 1) -> tuple[ModelConfig, dict, tokenizers.Tokenizer]:
    """A Qwen3-Reranker-shaped checkpoint (a causal LM with its own head)."""
    tokenizer = write_tokenizer(folder, append_end=False)
    config = tiny_config(tokenizer.get_vocab_size(), 512, tied=False)
    params = random_params(config, seed)
    write_hf(folder, config, params, "qwen3")
    return config, params, tokenizer


def reference_embedding(config: ModelConfig, params: dict, ids: list[int]) -> np.ndarray:
    """The last token's final state at unit length."""
    last = final_hidden(config, params, ids)[-1]
    return last / np.linalg.norm(last)


def reranker_prompt(query: str, document: str) -> str:
    """Qwen3-Reranker's prompt, as its model card writes it (default instruction)."""
    return ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
            "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n"
            "<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
            f"<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def reference_relevance(config: ModelConfig, params: dict, tokenizer: tokenizers.Tokenizer, query: str,
                        document: str) -> float:
    """P("yes") against "no" at the prompt's last token."""
    ids = tokenizer.encode(reranker_prompt(query, document), add_special_tokens=False).ids
    logits = forward(config, params, ids)[-1].astype(np.float64)
    no, yes = logits[tokenizer.token_to_id("no")], logits[tokenizer.token_to_id("yes")]
    return float(1 / (1 + np.exp(no - yes)))
