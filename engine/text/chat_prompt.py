"""Chat prompts in which the text of a message can never become a control token.

A chat template writes role markers such as `<|im_start|>` as text, and encoding the whole
rendered prompt with special-token parsing turns the same strings inside a message into
real markers too: one user could forge a system turn. So before rendering, every special
token's text inside the caller's strings is swapped for a marker (private-use characters
around a random per-render nonce, which no client can predict), and every special token
left in the rendered text is the template's own. Encoding splits the text there: each
template token becomes its id, and each stretch between them, markers restored, is
encoded with special-token parsing off.

For a prompt whose strings hold no special-token text, the ids are exactly those of
encoding the rendered text whole: the split follows the `tokenizers` library's own
(tokenizers/src/tokenizer/added_vocabulary.rs `find_matches`): leftmost-longest matches
of every added token, then their single_word, lstrip and rstrip flags.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import tokenizers

# Private-use characters: no tokenizer's special token contains them, and templates leave
# them alone (not whitespace, no case), so `| trim` and `| upper` cannot break a marker.
_MARKER_OPEN, _MARKER_CLOSE = "\ue000", "\ue001"
_NONCE_BASE = 0xE100  # nonce characters: one private-use character per random byte
_NONCE_BYTES = 8
_INDEX_BASE = 0xF0000  # supplementary private-use plane: one character names a special text
# Unicode White_Space, as the Rust regex `\s` the library strips with (Python's `\s` differs).
_WHITESPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
                        "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_WORD = re.compile(r"\w")


class FinalMessageNotFoundError(ValueError):
    """The final message's content does not appear in the rendered prompt, so the prompt
    cannot be cut after it (the template rewrote or dropped it). A bad request."""


class Markers:
    """One render's stand-ins for special-token texts, and the way back."""

    def __init__(self, special_texts: tuple[str, ...], pattern: re.Pattern[str] | None):
        """`pattern` finds any of `special_texts`, longest first (None when there are none)."""
        nonce = "".join(chr(_NONCE_BASE + byte) for byte in secrets.token_bytes(_NONCE_BYTES))
        self._prefix = _MARKER_OPEN + nonce
        self._special_texts = special_texts
        self._index = {text: index for index, text in enumerate(special_texts)}
        self._pattern = pattern
        self._marker_pattern = re.compile(re.escape(self._prefix) + "(.)" + _MARKER_CLOSE, re.DOTALL)

    def escape(self, value: Any) -> Any:
        """`value` with special-token texts marked in every string, keys and nested ones too."""
        if isinstance(value, str):
            return self.escape_text(value)
        if isinstance(value, Mapping):
            return {self.escape(key): self.escape(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):  # other objects pass through: give plain data
            items = [self.escape(item) for item in value]
            return items if isinstance(value, list) else tuple(items)
        return value

    def escape_text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda found: self._marker(found.group()), text)

    def restore(self, text: str) -> str:
        """`text` with each marker back to the special-token text it stands for."""
        return self._marker_pattern.sub(
            lambda found: self._special_texts[ord(found.group(1)) - _INDEX_BASE], text)

    def _marker(self, special_text: str) -> str:
        return self._prefix + chr(_INDEX_BASE + self._index[special_text]) + _MARKER_CLOSE


@dataclass(frozen=True)
class ChatPrompt:
    """A rendered chat prompt whose caller-given text still has its special strings marked.

    Immutable, so one prompt may be shared between threads."""

    escaped_text: str  # the template's output; caller text in it carries markers
    markers: Markers

    @property
    def text(self) -> str:
        """The prompt text itself, every special string where it was written."""
        return self.markers.restore(self.escaped_text)

    def continued(self, continuation: str) -> ChatPrompt:
        """This prompt followed by caller text (an assistant prefill), marked the same way."""
        return replace(self, escaped_text=self.escaped_text + self.markers.escape_text(continuation))

    def cut_after_final_message(self, final_content: str) -> ChatPrompt:
        """This prompt ended right after the final message's content, leaving that turn open
        (transformers' `continue_final_message`). The template may have trimmed the content,
        so its last occurrence, trimmed, is searched for; raises FinalMessageNotFoundError."""
        final = self.markers.escape_text(final_content)
        stripped = final.strip()
        start = self.escaped_text.rfind(stripped) if stripped else -1
        if start < 0:
            raise FinalMessageNotFoundError(
                "the final message's content does not appear in the rendered chat, so it cannot "
                "be continued")
        kept = final.lstrip()  # trailing spacing too, where the template kept it
        end = start + (len(kept) if self.escaped_text.startswith(kept, start) else len(stripped))
        return replace(self, escaped_text=self.escaped_text[:end])


@dataclass(frozen=True)
class _Split:
    start: int
    stop: int
    token: tokenizers.AddedToken | None  # None: a gap between tokens
    token_id: int


class ChatEncoder:
    """For one `tokenizers.Tokenizer`: the markers a prompt is rendered with, and its ids.

    Nothing changes after __init__, so threads may share one. The tokenizer it is given is
    only read; parsing is switched off on private copies made from its JSON."""

    def __init__(self, tokenizer: tokenizers.Tokenizer):
        self._parsing = tokenizer
        added = tokenizer.get_added_tokens_decoder()
        self._special_texts = tuple(token.content for token in added.values() if token.special)
        self._special_pattern = _alternation(self._special_texts)
        self._added = {token.content: (token, token_id) for token_id, token in added.items()}
        # The library matches un-normalized tokens first, then normalized ones in the gaps.
        self._patterns = [pattern for pattern in (
            _alternation(t.content for t in added.values() if not t.normalized),
            _alternation(t.content for t in added.values() if t.normalized)) if pattern]
        self._plain_first, self._plain_rest = _plain_tokenizers(tokenizer)

    def new_markers(self) -> Markers:
        """Markers with a fresh nonce, for one render."""
        return Markers(self._special_texts, self._special_pattern)

    def encode(self, prompt: ChatPrompt, *, special_tokens_in_content: bool = False,
               add_special_tokens: bool = False) -> list[int]:
        """The ids of `prompt` (see Tokenizer.encode_chat)."""
        if special_tokens_in_content:
            return self._parsing.encode_batch([prompt.text], add_special_tokens=add_special_tokens)[0].ids
        parts = self._parts(prompt)
        if not add_special_tokens:
            return [token_id for part in parts for token_id in
                    ([part] if isinstance(part, int) else part.ids)]
        # The post-processor decides what to add (and where), so it sees the whole encoding.
        encodings = [self._token_encoding(part) if isinstance(part, int) else part for part in parts]
        merged = tokenizers.Encoding.merge(encodings, growing_offsets=True)
        return self._parsing.post_process(merged, add_special_tokens=True).ids

    def encode_plain(self, text: str) -> list[int]:
        """The ids of `text` as caller text after a template token: special strings plain."""
        return self._plain(text, 1).ids if text else []

    def _parts(self, prompt: ChatPrompt) -> list[tokenizers.Encoding | int]:
        """The template's special tokens as ids, the text between them encoded plain."""
        text, parts, offset = prompt.escaped_text, [], 0
        for split in self._template_tokens(text):
            if offset < split.start:
                parts.append(self._plain(prompt.markers.restore(text[offset:split.start]), offset))
            parts.append(split.token_id)
            offset = split.stop
        if offset < len(text):
            parts.append(self._plain(prompt.markers.restore(text[offset:]), offset))
        return parts

    def _plain(self, text: str, offset: int) -> tokenizers.Encoding:
        plain = self._plain_first if offset == 0 else self._plain_rest
        # encode_batch releases the GIL while it works (see Tokenizer.encode); encode may not.
        return plain.encode_batch([text], add_special_tokens=False)[0]

    def _token_encoding(self, token_id: int) -> tokenizers.Encoding:
        return self._parsing.encode(self._parsing.id_to_token(token_id), add_special_tokens=False)

    def _template_tokens(self, text: str) -> list[_Split]:
        """The special tokens in escaped text, all the template's, where the library finds them."""
        splits = [_Split(0, len(text), None, -1)]  # a gap to search: token None
        for pattern in self._patterns:
            splits = [found for split in splits for found in (
                self._find(text, split.start, split.stop, pattern) if split.token is None else [split])]
        return [split for split in splits if split.token is not None and split.token.special]

    def _find(self, text: str, begin: int, end: int, pattern: re.Pattern[str]) -> list[_Split]:
        """text[begin:end] split at added tokens: the token splits, and gaps (token None)."""
        splits, offset = [], begin
        for found in pattern.finditer(text, begin, end):
            token, token_id = self._added[found.group()]
            start, stop = found.span()
            if token.single_word and not _stands_alone(text, start, stop, begin, end):
                continue
            if token.lstrip:
                start = max(_space_start(text, start, begin), offset)
            if token.rstrip:
                stop = _space_stop(text, stop, end)
            if offset < start:
                splits.append(_Split(offset, start, None, -1))
            splits.append(_Split(start, stop, token, token_id))
            offset = stop
        if offset < end:
            splits.append(_Split(offset, end, None, -1))
        return splits


def _alternation(texts: Iterable[str]) -> re.Pattern[str] | None:
    """A pattern for the leftmost-longest of `texts`, or None for none."""
    ordered = sorted(set(texts), key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered))) if ordered else None


def _stands_alone(text: str, start: int, stop: int, begin: int, end: int) -> bool:
    # single_word: no word character touches the match inside its piece.
    before = start > begin and _WORD.match(text, start - 1) is not None
    after = stop < end and _WORD.match(text, stop) is not None
    return not before and not after


def _space_start(text: str, start: int, begin: int) -> int:
    while start > begin and text[start - 1] in _WHITESPACE:
        start -= 1
    return start


def _space_stop(text: str, stop: int, end: int) -> int:
    while stop < end and text[stop] in _WHITESPACE:
        stop += 1
    return stop


def _plain_tokenizers(tokenizer: tokenizers.Tokenizer) -> tuple[tokenizers.Tokenizer, tokenizers.Tokenizer]:
    """Copies that read special-token text as plain text: one for text at the start of the
    prompt, one for text after a template token.

    Two because Metaspace's prepend_scheme "first" prepends its space only to text at the
    very start, and a stretch encoded alone always is; the second copy never prepends."""
    serialized = tokenizer.to_str()
    first = _plain_copy(serialized)
    if '"first"' not in serialized:  # parsing a large vocabulary's JSON takes a while
        return first, first
    config = json.loads(serialized)
    rest_config = _never_prepend(config)
    return first, (first if rest_config == config else _plain_copy(json.dumps(rest_config)))


def _plain_copy(serialized: str) -> tokenizers.Tokenizer:
    copy = tokenizers.Tokenizer.from_str(serialized)
    copy.encode_special_tokens = True  # set before any thread can see it, never again
    copy.no_truncation()
    copy.no_padding()
    return copy


def _never_prepend(config: dict[str, Any]) -> dict[str, Any]:
    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            node = {key: rewrite(value) for key, value in node.items()}
            if node.get("type") == "Metaspace" and node.get("prepend_scheme") == "first":
                node["prepend_scheme"] = "never"
            return node
        return [rewrite(item) for item in node] if isinstance(node, list) else node
    return {**config, "pre_tokenizer": rewrite(config.get("pre_tokenizer"))}
