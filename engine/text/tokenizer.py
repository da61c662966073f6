"""Tokenizers from tokenizer.json or GGUF metadata, and chat prompts (incremental detokenizing:
engine/text/detokenizer.py).

Everything runs on the Hugging Face `tokenizers` library (Rust); transformers and torch
are never needed. A GGUF file's vocabulary becomes a `tokenizers` byte-level BPE
(engine/text/gguf_vocab.py), so llguidance can read the same vocabulary from `to_json_str()`
whatever the checkpoint format.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers

from engine.text.chat_prompt import ChatEncoder, ChatPrompt
from engine.text.chat_template import ChatTemplate, MissingChatTemplateError
from engine.text.detokenizer import TokenPieces
from engine.text.gguf_vocab import gguf_byte_level_bpe, special_tokens_processor
from engine.text.reasoning import ThinkingTags, thinking_tags


MAX_BYTES_PER_CHARACTER = 4  # of UTF-8


class Tokenizer:
    """A `tokenizers.Tokenizer` plus what the checkpoint says about special tokens and chat."""

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        *,
        bos_token_id: int | None = None,
        eos_token_ids: Iterable[int] = (),
        pad_token_id: int | None = None,
        chat_template: str | None = None,
    ):
        """Wrap `tokenizer`, whose post-processor already adds BOS/EOS as the model wants."""
        self._tokenizer = tokenizer
        self.bos_token_id = bos_token_id
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(eos_token_ids))
        self.pad_token_id = pad_token_id
        self.chat_template = chat_template
        self.vocab_size: int = max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1
        self._compiled_template: ChatTemplate | None = None
        self._chat_encoder_instance: ChatEncoder | None = None
        self._chat_encoder_lock = threading.Lock()
        self._pieces: dict[bool, TokenPieces] = {}  # byte_pieces' tables, by skip_special_tokens

    @classmethod
    def from_hf_directory(cls, path: str | os.PathLike) -> Tokenizer:
        """Load tokenizer.json, with tokenizer_config.json, generation_config.json and
        chat_template.jinja from beside it where present."""
        root = Path(path)
        tokenizer = tokenizers.Tokenizer.from_file(str(root / "tokenizer.json"))
        config = _read_json(root / "tokenizer_config.json")
        generation = _read_json(root / "generation_config.json")
        bos, eos, pad = (_token_text(config.get(f"{k}_token")) for k in ("bos", "eos", "pad"))
        if "add_bos_token" in config or "add_eos_token" in config:
            # As transformers' LlamaTokenizerFast does: the config overrides tokenizer.json.
            tokenizer.post_processor = special_tokens_processor(
                tokenizer, bos if config.get("add_bos_token") else None,
                eos if config.get("add_eos_token") else None,
            )
        end_ids = [tokenizer.token_to_id(eos) if eos else None]
        end_ids += _as_list(generation.get("eos_token_id"))
        return cls(
            tokenizer,
            bos_token_id=tokenizer.token_to_id(bos) if bos else generation.get("bos_token_id"),
            eos_token_ids=[i for i in end_ids if i is not None],
            pad_token_id=tokenizer.token_to_id(pad) if pad else None,
            chat_template=_hf_chat_template(root, config.get("chat_template")),
        )

    @classmethod
    def from_gguf(cls, source: str | os.PathLike | Any) -> Tokenizer:
        """Build the tokenizer a GGUF file describes in its tokenizer.* metadata.

        `source` is a path, an open `gguf.GGUFReader`, or its `fields` mapping, so a loader
        that has already parsed the file need not parse it again. Raises ValueError for a
        tokenizer model or pre-tokenizer it cannot build faithfully.
        """
        if isinstance(source, (str, os.PathLike)):
            import gguf  # deferred: only GGUF checkpoints need it

            source = gguf.GGUFReader(str(source))
        fields: Mapping[str, Any] = getattr(source, "fields", source)

        def value(key: str, default: Any = None) -> Any:
            field = fields.get(key)
            return field.contents() if field is not None else default

        end_ids = [value(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")]
        return cls(
            gguf_byte_level_bpe(value),
            bos_token_id=_optional_int(value("tokenizer.ggml.bos_token_id")),
            eos_token_ids=[int(i) for i in end_ids if i is not None],
            pad_token_id=_optional_int(value("tokenizer.ggml.padding_token_id")),
            chat_template=value("tokenizer.chat_template"),
        )

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids for `text`; with `add_special_tokens`, BOS/EOS where the model wants them."""
        # encode_batch, not encode: it releases the GIL while it works, where encode can hold
        # it for seconds on a long text and stall every other thread (the API's event loop).
        return self._tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def encode_pair(self, first: str, second: str, max_second: int | None = None) -> tuple[list[int], list[int]]:
        """Token ids and token types of two texts in one input, as the post-processor joins
        them (a cross-encoder's query and document: [CLS] first [SEP] second [SEP], types 0
        then 1); the second text cut to its first `max_second` tokens where given."""
        encode = self._tokenizer.encode
        first_part, second_part = encode(first, add_special_tokens=False), encode(second, add_special_tokens=False)
        if max_second is not None:
            second_part.truncate(max(max_second, 0))
        encoding = self._tokenizer.post_process(first_part, second_part)
        return encoding.ids, encoding.type_ids

    def encode_truncated(self, text: str, max_tokens: int, keep: str = "last") -> list[int]:
        """`encode(text)` cut to `max_tokens`, the special tokens kept: the text's last
        tokens kept (vLLM's truncate_prompt_tokens) or its first (`keep="first"`, Cohere's
        max_tokens_per_doc)."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        room = max(max_tokens - self._tokenizer.num_special_tokens_to_add(False), 0)
        encoding.truncate(room, direction="left" if keep == "last" else "right")
        return self._tokenizer.post_process(encoding).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """The text of `ids`; bytes that do not form UTF-8 become U+FFFD."""
        ids = [int(i) for i in ids]  # NumPy integers are refused by the Rust side
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        """The id of a token given in its vocabulary spelling (byte-level: "Ġhello")."""
        return self._tokenizer.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary spelling of `token_id`, or None outside the vocabulary."""
        return self._tokenizer.id_to_token(int(token_id))

    @property
    def add_bos_token(self) -> bool:
        """Whether `encode` puts BOS first (what the post-processor does to empty text)."""
        return self.bos_token_id is not None and self.encode("")[:1] == [self.bos_token_id]

    def longest_token_bytes(self) -> int:
        """The most bytes one token of the vocabulary stands for: its own bytes (`token_bytes`)
        or the UTF-8 of its text, whichever is longer.

        Exact, without decoding all of a large vocabulary (a fifth of a second for 49,152
        tokens): a token stands for at most 4 bytes per character of its spelling (the
        UTF-8 of a character; byte-level spellings are a byte a character, and a byte that
        is no character decodes to U+FFFD, 3 bytes), so the tokens are measured longest
        spelling first, until no spelling left could beat the longest found."""
        by_length = sorted(self._tokenizer.get_vocab(with_added_tokens=True).items(),
                           key=lambda item: len(item[0]), reverse=True)
        longest = 0
        for spelling, token in by_length:
            if MAX_BYTES_PER_CHARACTER * len(spelling) <= longest:
                break
            longest = max(longest, len(self.token_bytes(token) or b""), len(self.decode([token]).encode()))
        return longest

    def token_bytes(self, token_id: int) -> bytes | None:
        """The bytes `token_id` stands for (a piece of a character possibly), or None.

        Logprobs report them (OpenAI's `bytes`) because a token's text alone cannot show
        a character split across tokens. Byte-level BPE spells every byte as one printable
        character; other vocabularies spell raw bytes as `<0xNN>` and the rest as text."""
        spelling = self.id_to_token(token_id)
        if spelling is None:
            return None
        if isinstance(self._tokenizer.decoder, tokenizers.decoders.ByteLevel) and \
                all(char in _BYTE_LEVEL_BYTES for char in spelling):
            return bytes(_BYTE_LEVEL_BYTES[char] for char in spelling)
        if re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", spelling):
            return bytes([int(spelling[3:5], 16)])
        return self.decode([token_id]).encode("utf-8")

    def byte_pieces(self, skip_special_tokens: bool) -> TokenPieces | None:
        """Each token's bytes as a decode of many tokens joins them (`TokenPieces`), where
        the decoder is GPT-2's byte level alone: its text of a run of tokens is their bytes
        joined, read as UTF-8, whatever their neighbours. None for other decoders (a
        SentencePiece one strips a leading space, so a token's text depends on its place)."""
        if not isinstance(self._tokenizer.decoder, tokenizers.decoders.ByteLevel):
            return None
        if skip_special_tokens not in self._pieces:  # two threads at once build two equal tables
            self._pieces[skip_special_tokens] = TokenPieces(self, skip_special_tokens)
        return self._pieces[skip_special_tokens]

    def added_token_ids(self, special: bool) -> frozenset[int]:
        """The ids of the added tokens (outside the BPE model's vocabulary), of the special
        ones only where `special`."""
        added = self._tokenizer.get_added_tokens_decoder()
        return frozenset(token for token, content in added.items() if content.special or not special)

    def encode_plain(self, text: str) -> list[int]:
        """Token ids for `text` as it would follow a template token, special-token strings
        in it read as plain text (as messages' own text is)."""
        return self._chat_encoder().encode_plain(text)

    @property
    def thinking(self) -> ThinkingTags | None:
        """The tags of the model's thinking section, or None when it does not reason
        (engine/text/reasoning.py: single tokens of the vocabulary, written by the chat template)."""
        return thinking_tags(self)

    def to_json_str(self) -> str:
        """The `tokenizers` JSON serialization (what llguidance builds its tokenizer from)."""
        return self._tokenizer.to_str()

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text the chat template makes of `messages` (see ChatTemplate.render).

        Encoding this text parses special-token strings written inside messages too; to
        encode a conversation, use render_chat_prompt and encode_chat instead."""
        return self._template().render(messages, add_generation_prompt, tools, **kwargs)

    def render_chat_prompt(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> ChatPrompt:
        """The chat template's prompt for `messages`, for encode_chat.

        Special-token text inside any string given here (messages, tools, template
        variables) is marked before rendering, so it stays plain text when encoded."""
        template = self._template()
        markers = self._chat_encoder().new_markers()
        text = template.render(markers.escape(messages), add_generation_prompt, markers.escape(tools),
                               **markers.escape(kwargs))
        return ChatPrompt(text, markers)

    def encode_chat(self, prompt: ChatPrompt, *, special_tokens_in_content: bool = False,
                    add_special_tokens: bool = False) -> list[int]:
        """The token ids of `prompt`: the template's special tokens as their ids, the
        caller's text as plain text (or, with `special_tokens_in_content`, parsed as in
        `encode(prompt.text)`). `add_special_tokens` adds what `encode` would add (BOS).

        Without special strings in the caller's text, the ids equal
        `encode(render_chat(...), add_special_tokens=...)`. Safe to call from many threads."""
        return self._chat_encoder().encode(prompt, special_tokens_in_content=special_tokens_in_content,
                                           add_special_tokens=add_special_tokens)

    def _template(self) -> ChatTemplate:
        if self.chat_template is None:
            raise MissingChatTemplateError(
                "the model has no chat template, so messages cannot become a prompt; "
                "give it a plain text prompt instead"
            )
        if self._compiled_template is None:  # a race compiles it twice, harmlessly
            eos = self.eos_token_ids[0] if self.eos_token_ids else None
            special = {"bos_token": self._text(self.bos_token_id), "eos_token": self._text(eos)}
            self._compiled_template = ChatTemplate(self.chat_template, special)
        return self._compiled_template

    def _chat_encoder(self) -> ChatEncoder:
        # Built on first use (copying the tokenizer takes ~0.1 s), once, under a lock.
        with self._chat_encoder_lock:
            if self._chat_encoder_instance is None:
                self._chat_encoder_instance = ChatEncoder(self._tokenizer)
            return self._chat_encoder_instance

    def _text(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.decode([token_id])


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level spelling: printable Latin-1 bytes as themselves, the others
    (controls, space, ...) as the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    others = [byte for byte in range(256) if byte not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + i): b for i, b in enumerate(others)}}


_BYTE_LEVEL_BYTES = _byte_level_alphabet()


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _token_text(token: str | Mapping[str, Any] | None) -> str | None:
    # tokenizer_config.json writes a special token as text or as a serialized AddedToken.
    return token.get("content") if isinstance(token, Mapping) else token


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _as_list(value: int | list[int] | None) -> list[int]:
    return [] if value is None else list(value) if isinstance(value, list) else [value]


def _hf_chat_template(root: Path, configured: str | list[Mapping[str, str]] | None) -> str | None:
    # Newer checkpoints keep the template in its own file rather than in the config.
    if (root / "chat_template.jinja").is_file():
        return (root / "chat_template.jinja").read_text(encoding="utf-8")
    if isinstance(configured, list):  # several named templates; chat uses "default"
        return {t["name"]: t["template"] for t in configured}.get("default")
    return configured
