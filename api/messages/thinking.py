"""Thinking in Messages: `thinking` blocks out, and back in as history, signed.

A reply from a model that thought starts with a `thinking` block: the thinking's text and
a `signature`, the HMAC-SHA256 of that text under this server's key (base64). Streamed,
the block opens at the first thinking text, gets `thinking_delta`s, and just before its
content_block_stop a `signature_delta` (api/messages/tool_calls.py `StreamBlocks`).

A client passes thinking back unchanged in the assistant turns of later requests, as
Anthropic's API asks. The server checks each block's signature, as Anthropic does: a block
whose text is not the one this server signed (edited, or made elsewhere) is a 400 naming
its `signature`, so a prompt never holds thinking the model did not write. A turn's blocks
become its `reasoning_content`, which the chat template renders or drops as it does
(Qwen3's keeps the thinking of the turns after the last user message: a tool loop).

The key lives in the data directory (`thinking-signature.key`, made on first use), so
signatures outlive a restart and are shared by servers on the same directory; where it
cannot be written, a key for this process alone is used (and logged).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from api.core.errors import invalid
from generated.flint import ThinkingBlock, ThinkingBlockParam

log = logging.getLogger("flint")

KEY_FILE = "thinking-signature.key"
KEY_BYTES = 32


@functools.cache
def signing_key(data_dir: str) -> bytes:
    """The server's signing key, read from the data directory or made there."""
    path = Path(data_dir) / KEY_FILE
    if path.is_file():
        return path.read_bytes()
    key = secrets.token_bytes(KEY_BYTES)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another server made it first
        return path.read_bytes()
    except OSError as error:
        log.warning("thinking signatures: cannot keep a key in %s (%s); signatures last until restart", path, error)
        return key
    with os.fdopen(descriptor, "wb") as file:
        file.write(key)
    return key


def signature(key: bytes, thinking: str) -> str:
    return base64.b64encode(hmac.new(key, thinking.encode("utf-8"), hashlib.sha256).digest()).decode("ascii")


def thinking_block(key: bytes, thinking: str) -> ThinkingBlock:
    return ThinkingBlock(type="thinking", thinking=thinking, signature=signature(key, thinking))


def checked_thinking(key: bytes, block: ThinkingBlockParam, path: str) -> str:
    """A thinking block's text, once its signature proves this server wrote it."""
    if not hmac.compare_digest(block.signature, signature(key, block.thinking)):
        raise invalid(f"{path}.signature", "the thinking block's signature does not match its text: pass thinking "
                                           "blocks back exactly as this server returned them")
    return block.thinking
