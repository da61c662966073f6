"""A GGUF file's vocabulary as a `tokenizers` byte-level BPE that splits text as llama.cpp does.

A GGUF file stores its vocabulary as token strings, merges and token types plus a
pre-tokenizer name; this module turns them back into a `tokenizers.Tokenizer` whose
pre-tokenizer matches llama.cpp's for that name, so the model sees the ids it was trained on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors

# The pre-tokenizer regexes llama.cpp applies for each `tokenizer.ggml.pre` name
# (src/llama-vocab.cpp). Each regex splits the pieces left by the one before, keeping
# matches and gaps alike: exactly a chain of `Split(..., "isolated")`. Where llama.cpp
# rewrote a regex for its own engine, the original from the model's tokenizer.json is used.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_TEKKEN = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_GPT4O = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class _PreType:
    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a whole piece found in the vocab is one token, unmerged
    add_bos: bool = False  # llama.cpp's default when the file has no add_bos_token


_BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"
_PRE_NAMES: dict[_PreType, tuple[str, ...]] = {
    # llama.cpp's choice for "default" and for files too old to name a pre-tokenizer.
    _PreType((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]")): ("default",),
    _PreType((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]")): ("falcon",),
    _PreType((_GPT2,)): (
        "gpt2", "gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4", "roberta-bpe", "trillion",
        "gigachat", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "jina-v2-code", "granite-docling", "a.x-4.0", "mellum",
    ),
    _PreType((r"\p{N}", _GPT2)): (  # digits one by one, then GPT-2
        "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
    ),
    _PreType((_LLAMA3,), ignore_merges=True, add_bos=True): (
        "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
    ),
    _PreType((_LLAMA3,)): ("dbrx", "smaug-bpe", "glm4", "chatglm-bpe"),
    _PreType((_QWEN2,)): ("qwen2", "deepseek-r1-qwen", "kormo", "megrez", "stablelm2"),
    _PreType((_BLOOM,)): ("bloom", "poro-chat", "gpt3-finnish"),
    _PreType((_TEKKEN,), ignore_merges=True, add_bos=True): ("tekken",),
    _PreType((_GPT4O,)): ("gpt-4o", "llama4"),
}
_PRE_TYPES = {name: pre for pre, names in _PRE_NAMES.items() for name in names}

# tokenizer.ggml.token_type values (gguf.TokenType).
_CONTROL, _USER = 3, 4


def gguf_byte_level_bpe(value: Callable[..., Any]) -> tokenizers.Tokenizer:
    model, pre_name = value("tokenizer.ggml.model"), value("tokenizer.ggml.pre") or "default"
    if model != "gpt2":
        raise ValueError(
            f"unsupported GGUF tokenizer model {model!r} (tokenizer.ggml.model): Flint builds "
            "byte-level BPE ('gpt2') tokenizers only; for SentencePiece ('llama') and others "
            "serve the checkpoint's Hugging Face directory with its tokenizer.json"
        )
    if pre_name not in _PRE_TYPES:
        raise ValueError(
            f"unsupported GGUF pre-tokenizer {pre_name!r} (tokenizer.ggml.pre); "
            f"supported: {', '.join(sorted(_PRE_TYPES))}"
        )
    pre_type, tokens = _PRE_TYPES[pre_name], value("tokenizer.ggml.tokens")
    types = value("tokenizer.ggml.token_type", [])
    tokenizer = _byte_level_bpe(tokens, value("tokenizer.ggml.merges", []), types, pre_type)
    add_bos = value("tokenizer.ggml.add_bos_token", pre_type.add_bos)
    add_eos = value("tokenizer.ggml.add_eos_token", False)
    if add_bos or add_eos:
        bos, eos = (value(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos"))
        tokenizer.post_processor = special_tokens_processor(
            tokenizer, tokens[bos] if add_bos else None, tokens[eos] if add_eos else None
        )
    return tokenizer


def _byte_level_bpe(
    tokens: list[str], merges: list[str], token_types: list[int], pre_type: _PreType
) -> tokenizers.Tokenizer:
    # llama.cpp names empty tokens so, and refuses duplicate spellings.
    vocab = {token or f"[EMPTY_{i}]": i for i, token in enumerate(tokens)}
    # A merge is "left right"; llama.cpp splits it at the first space after the first byte.
    pairs = [(m[: m.index(" ", 1)], m[m.index(" ", 1) + 1 :]) for m in merges]
    tokenizer = tokenizers.Tokenizer(
        models.BPE(vocab=vocab, merges=pairs, ignore_merges=pre_type.ignore_merges)
    )
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre_type.regexes]
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([*splits, byte_level])
    tokenizer.decoder = decoders.ByteLevel()
    # Control and user-defined tokens are stored as plain text and matched before splitting.
    typed = list(zip(tokens, token_types))
    specials = [AddedToken(t, special=True, normalized=False) for t, k in typed if k == _CONTROL]
    added = [AddedToken(t, special=False, normalized=False) for t, k in typed if k == _USER]
    tokenizer.add_special_tokens(specials)
    tokenizer.add_tokens(added)
    return tokenizer


def special_tokens_processor(
    tokenizer: tokenizers.Tokenizer, bos: str | None, eos: str | None
) -> processors.TemplateProcessing:
    for name, token in (("BOS", bos), ("EOS", eos)):
        if token is not None and tokenizer.token_to_id(token) is None:
            raise ValueError(f"the {name} token {token!r} is not in the vocabulary")
    prefix, suffix = [bos] if bos else [], [eos] if eos else []
    return processors.TemplateProcessing(
        single=[*prefix, "$A", *suffix],
        pair=[*prefix, "$A", *suffix, *prefix, "$B:1", *suffix],
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in dict.fromkeys(prefix + suffix)],
    )
