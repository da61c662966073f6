"""Faults tied to one request: that request fails, the engine serves on.

A step does host work per request (its grammar's masks and matcher, its detokenizer and
stop strings, its replaced embeddings, its beam search) between device work shared by the
whole batch. An exception in the per-request work is that request's fault: the engine
finishes it with finish_reason "error" (its pages freed, `RequestOutput.error` set), and
the server answers it with a 500 in its dialect's shape. An exception anywhere else (the
device, a collective, the runner's packing) still stops the engine, as it must: the KV
cache and every other request's state can no longer be trusted.
"""

from __future__ import annotations

import logging

from engine.host.request import RequestOutput
from engine.host.sequence import Sequence

log = logging.getLogger("flint")

ERROR = "error"  # the finish reason of a failed request


def failed_output(seq: Sequence, error: BaseException) -> RequestOutput:
    """The last output of `seq`, which failed on `error` (already finished by the caller):
    no text, since its detokenizer may be what failed."""
    log.error("request %s failed on its own and was ended; the engine serves on", seq.request_id, exc_info=error)
    return RequestOutput(request_id=seq.request_id, new_token_ids=[], text="", finish_reason=ERROR,
                         num_prompt_tokens=seq.num_prompt_tokens, num_cached_tokens=seq.num_cached_tokens,
                         num_output_tokens=seq.num_output_tokens, seed=seq.seed, error=error)

