"""An independent NumPy forward of a Hugging Face BERT checkpoint and of sentence-transformers'
pooling, written for the tests from the architecture's definition: it reads the checkpoint's
tensors by their own names and layouts ([out, in] Linear weights, separate q, k and v), one
text at a time, with no padding, and shares no code with engine/models/bert.py or pooling.py.
Also a writer of tiny random sentence-transformers checkpoints, tokenizer included."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import safetensors.numpy
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

ERF = np.frompyfunc(math.erf, 1, 1)
WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "mat", "big", "small", "red", "blue", "fast", "slow",
         "bird", "sang", "##s", "##ed", "##ing", ".", ","]


def gelu(x: np.ndarray) -> np.ndarray:
    return x * 0.5 * (1.0 + ERF(x / math.sqrt(2.0)).astype(np.float64))


def norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps) * weight + bias


def bert_states(tensors: dict, config: dict, ids: list[int], types: list[int] | None = None) -> np.ndarray:
    """The last layer's states [tokens, hidden] of one text (or pair: `types` 0 and 1), in float64."""
    t = {name.removeprefix("bert."): np.asarray(value, np.float64) for name, value in tensors.items()}
    ids = list(ids)
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    x = (t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:len(ids)]
         + t["embeddings.token_type_embeddings.weight"][types if types is not None else 0])
    x = norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    for i in range(config["num_hidden_layers"]):
        def dense(name, h):
            return h @ t[f"encoder.layer.{i}.{name}.weight"].T + t[f"encoder.layer.{i}.{name}.bias"]

        q, k, v = (dense(f"attention.self.{part}", x) for part in ("query", "key", "value"))
        dim = q.shape[-1] // heads
        context = np.zeros_like(q)
        for head in range(heads):
            part = slice(head * dim, (head + 1) * dim)
            scores = q[:, part] @ k[:, part].T / math.sqrt(dim)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            context[:, part] = weights / weights.sum(-1, keepdims=True) @ v[:, part]
        prefix = f"encoder.layer.{i}"
        x = norm(x + dense("attention.output.dense", context), t[f"{prefix}.attention.output.LayerNorm.weight"],
                 t[f"{prefix}.attention.output.LayerNorm.bias"], eps)
        x = norm(x + dense("output.dense", gelu(dense("intermediate.dense", x))),
                 t[f"{prefix}.output.LayerNorm.weight"], t[f"{prefix}.output.LayerNorm.bias"], eps)
    return x


def pooled(states: np.ndarray, mode: str, normalize: bool) -> np.ndarray:
    vector = {"mean": states.mean(0), "cls": states[0], "last": states[-1]}[mode]
    return vector / np.linalg.norm(vector) if normalize else vector


def cross_encoder_score(tensors: dict, config: dict, ids: list[int], types: list[int], sigmoid: bool) -> float:
    """BertForSequenceClassification's one logit (the classifier over the pooler's tanh of
    [CLS]), through the sigmoid or as it is."""
    states = bert_states(tensors, config, ids, types)
    pooled = np.tanh(tensors["bert.pooler.dense.weight"].astype(np.float64) @ states[0] + tensors["bert.pooler.dense.bias"])
    logit = float(tensors["classifier.weight"][0].astype(np.float64) @ pooled + tensors["classifier.bias"][0])
    return 1 / (1 + math.exp(-logit)) if sigmoid else logit


# --- tiny random checkpoints ------------------------------------------------------------

POOLING_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token", "last": "pooling_mode_lasttoken"}


def tiny_config(vocab_size: int) -> dict:
    return {"architectures": ["BertModel"], "model_type": "bert", "vocab_size": vocab_size, "hidden_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
            "max_position_embeddings": 64, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
            "position_embedding_type": "absolute"}


def tiny_tensors(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    hidden, inner = config["hidden_size"], config["intermediate_size"]

    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    tensors = {"embeddings.word_embeddings.weight": normal(config["vocab_size"], hidden),
               "embeddings.position_embeddings.weight": normal(config["max_position_embeddings"], hidden),
               "embeddings.token_type_embeddings.weight": normal(2, hidden),
               "embeddings.LayerNorm.weight": 1 + normal(hidden, scale=0.1),
               "embeddings.LayerNorm.bias": normal(hidden, scale=0.1)}
    shapes = {"attention.self.query": (hidden, hidden), "attention.self.key": (hidden, hidden),
              "attention.self.value": (hidden, hidden), "attention.output.dense": (hidden, hidden),
              "intermediate.dense": (inner, hidden), "output.dense": (hidden, inner)}
    for i in range(config["num_hidden_layers"]):
        for name, (rows, columns) in shapes.items():
            tensors[f"encoder.layer.{i}.{name}.weight"] = normal(rows, columns)
            tensors[f"encoder.layer.{i}.{name}.bias"] = normal(rows, scale=0.1)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[f"encoder.layer.{i}.{name}.weight"] = 1 + normal(hidden, scale=0.1)
            tensors[f"encoder.layer.{i}.{name}.bias"] = normal(hidden, scale=0.1)
    return tensors


def tiny_tokenizer() -> Tokenizer:
    """A WordPiece tokenizer as BERT's: lower-cased, [CLS] text [SEP]."""
    vocab = {token: index for index, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tokenizer


def write_sentence_transformer(folder: Path, mode: str = "mean", normalize: bool = True, seed: int = 0,
                               modules_extra: tuple[dict, ...] = ()) -> tuple[dict, dict]:
    """A tiny random sentence-transformers checkpoint in `folder`: its config and tensors."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"pad_token": "[PAD]", "do_lower_case": True}))
    config = tiny_config(tokenizer.get_vocab_size())
    (folder / "config.json").write_text(json.dumps(config))
    tensors = tiny_tensors(config, seed)
    safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"))
    stage = "sentence_transformers.models."
    modules = [{"idx": 0, "name": "0", "path": "", "type": stage + "Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": stage + "Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": stage + "Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules + list(modules_extra)))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    pooling = {"word_embedding_dimension": config["hidden_size"], **{key: False for key in POOLING_KEYS.values()},
               POOLING_KEYS[mode]: True}
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48}))
    return config, tensors


def write_cross_encoder(folder: Path, activation: str | None = None, labels: int = 1, seed: int = 1) -> tuple[dict, dict]:
    """A tiny random BertForSequenceClassification with sentence-transformers' CrossEncoder
    config (`activation`: its activation_fn, None to leave the default)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {**tiny_config(tokenizer.get_vocab_size()), "architectures": ["BertForSequenceClassification"],
              "id2label": {str(index): f"LABEL_{index}" for index in range(labels)}}
    if activation is not None:
        config["sentence_transformers"] = {"activation_fn": activation}
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(seed + 100)
    hidden = config["hidden_size"]
    tensors = {"bert." + name: value for name, value in tiny_tensors(config, seed).items()}
    tensors |= {"bert.pooler.dense.weight": (rng.standard_normal((hidden, hidden)) * 0.3).astype(np.float32),
                "bert.pooler.dense.bias": (rng.standard_normal(hidden) * 0.1).astype(np.float32),
                "classifier.weight": (rng.standard_normal((labels, hidden)) * 0.5).astype(np.float32),
                "classifier.bias": (rng.standard_normal(labels) * 0.1).astype(np.float32)}
    safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"))
    return config, tensors
