"""Incremental detokenizing: the text a growing run of generated token ids adds, never
splitting a character (engine/host/output.py pushes each generated token).

A byte-level vocabulary (GPT-2's, and every GGUF file's here) joins its tokens' bytes
(`TokenPieces`) through an incremental UTF-8 decoder; other vocabularies decode small
windows through the tokenizer.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # engine/text/tokenizer.py imports this module
    from engine.text.tokenizer import Tokenizer


class TokenPieces:
    """The bytes each token stands for in a byte-level decode (`Tokenizer.byte_pieces`),
    looked up once a token and kept: a list lookup a token where a decode through the
    tokenizer costs two calls into Rust for each incremental step (the host's largest cost
    a decode step at many sequences, tools/profile_host.py)."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool):
        self._tokenizer = tokenizer
        self._skipped = tokenizer.added_token_ids(special=True) if skip_special_tokens else frozenset()
        self._added = tokenizer.added_token_ids(special=False)
        self._known: list[bytes | None] = [None] * tokenizer.vocab_size
        # Each token met so far: its text where its bytes are whole UTF-8 characters (most
        # tokens), else False. Such a token met with no character pending adds its text as it
        # is, without a decoder call (IncrementalDetokenizer._texts).
        self.whole: dict[int, str | bool] = {}

    def __call__(self, token_id: int) -> bytes:
        known = self._known[token_id] if 0 <= token_id < len(self._known) else None
        if known is None:
            known = self._bytes(token_id)
            if 0 <= token_id < len(self._known):
                self._known[token_id] = known
        return known

    def joined(self, token_ids: Sequence[int]) -> bytes:
        return b"".join([self(int(token)) for token in token_ids])

    def whole_text(self, token_id: int) -> str | bool:
        """The token's text if its bytes are whole UTF-8 characters ("" for none), else
        False; kept in `whole`."""
        try:
            text = self(token_id).decode("utf-8")
        except UnicodeDecodeError:
            text = False
        self.whole[token_id] = text
        return text

    def _bytes(self, token_id: int) -> bytes:
        if token_id in self._skipped:
            return b""
        if token_id in self._added:  # its content, as written
            return self._tokenizer.decode([token_id]).encode("utf-8")
        return self._tokenizer.token_bytes(token_id) or b""


class IncrementalDetokenizer:
    """Text deltas for a growing sequence of generated ids, never splitting a character.

    A byte-level vocabulary (GPT-2's, and every GGUF file's here) joins its tokens' bytes
    (`TokenPieces`) through an incremental UTF-8 decoder. Otherwise each push decodes only
    a window: the tokens of the last emitted delta (context, so decoders that treat a
    leading space or byte specially see the same neighbours) plus the tokens not yet
    emitted. Text whose end is U+FFFD may be a character cut in the middle, so its tokens
    wait for the next push (as in vLLM and HF's TextStreamer).
    """

    # Tokens of prompt kept as context for the first delta, as vLLM does.
    _PROMPT_CONTEXT = 5
    # Longest a token run may wait; past it the U+FFFD is invalid bytes, not a cut character.
    _MAX_PENDING = 32

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int] | None = None,
                 skip_special_tokens: bool = False):
        """Start after `prompt_ids` (whose text is not emitted) or at the beginning."""
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        context = list(prompt_ids)[-self._PROMPT_CONTEXT:] if prompt_ids is not None else []
        # A byte-level vocabulary's text is its tokens' bytes joined: they go through an
        # incremental UTF-8 decoder, which holds a character's first bytes until its last.
        self._pieces = tokenizer.byte_pieces(skip_special_tokens)
        if self._pieces is not None:
            self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
            self._utf8.decode(self._pieces.joined(context))
            # A character the prompt began is the prompt's, not shown (its first character
            # out, whether completed or U+FFFD): text is the whole's past the prompt's text.
            self._prompt_character = bool(self._utf8.getstate()[0])
            self._pending = self._prompt_character  # bytes of a character held in the decoder
            return
        self._window = [int(i) for i in context]
        self._read = len(self._window)  # window[:read] is context already emitted
        self._read_text = self._decode(self._window)

    def push(self, token_ids: Sequence[int]) -> str:
        """The new text `token_ids` complete; "" while a character is still incomplete."""
        if self._pieces is not None:
            return self._past_prompt("".join(self._texts(token_ids)))
        pending_before = len(self._window) - self._read
        self._window.extend(int(i) for i in token_ids)
        text = self._decode(self._window)
        complete = not text.endswith("\ufffd") or pending_before > self._MAX_PENDING
        if len(text) <= len(self._read_text) or not complete:
            return ""
        return self._advance(text)

    def push_each(self, token_ids: Sequence[int]) -> list[str]:
        """`push` of each token in turn: the text each one adds (a decode window's tokens,
        whose stop strings need to know which token completed one, engine/host/window_output.py)."""
        if self._pieces is None:
            return [self.push([token]) for token in token_ids]
        texts = self._texts(token_ids)
        if self._prompt_character:
            first = next((index for index, text in enumerate(texts) if text), None)
            if first is not None:
                texts[first] = self._past_prompt(texts[first])
        return texts

    def flush(self) -> str:
        """Whatever is still held back, broken characters shown as U+FFFD."""
        if self._pieces is not None:
            self._pending = False
            return self._past_prompt(self._utf8.decode(b"", final=True))
        text = self._decode(self._window)
        return self._advance(text) if len(text) > len(self._read_text) else ""

    def _texts(self, token_ids: Sequence[int]) -> list[str]:
        """What each token adds. A token of whole characters met with none pending is its
        text as it is (kept), without a decoder call; the rest go through the decoder."""
        pieces, texts = self._pieces, []
        known = pieces.whole
        for token in token_ids:
            text = known.get(token)
            if text is None:
                text = pieces.whole_text(token)
            if text is False or self._pending:
                text = self._decode_bytes(pieces(token))
            texts.append(text)
        return texts

    def _decode_bytes(self, data: bytes) -> str:
        text = self._utf8.decode(data)
        self._pending = bool(self._utf8.getstate()[0])
        return text

    def _past_prompt(self, text: str) -> str:
        if self._prompt_character and text:
            self._prompt_character = False
            return text[1:]
        return text

    def _advance(self, text: str) -> str:
        delta = text[len(self._read_text):]
        self._window = self._window[self._read:]
        self._read = len(self._window)
        self._read_text = self._decode(self._window)
        return delta

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special_tokens)
