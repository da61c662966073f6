"""A decode window's results landed a row at a time, not a token at a time.

A window of k decode steps (engine/host/decode_window.py) used to go through the output
stage k times: for each row and round, the scheduler's update, a detokenizer push, a
stop-string scan and a RequestOutput, then the k outputs joined. At 256 rows that was most
of the host's time per step (tools/profile_host.py). Here each row's k tokens are taken at
once: the first end token and the limits are found in its list, the tokens up to them are
pushed through its detokenizer, their text is scanned for stop strings once, the sequence
advances by all its kept tokens in one update, and it gets one RequestOutput.

The result is the output stage's, round by round (tests/engine/test_window_output.py compares
them): the first token that ends a row ends it, with the checks in the stage's order at one
token (an end token, then a stop string, then the limits), and its later tokens are dropped.
A stop string is found in the joined text where the stage's scan, token by token, would
have found it (engine/text/stop_strings.py `feed_pieces`).

Only plain rows take this path: no logprobs, logits or thinking section (a grammar, a beam or
a draft never runs in a window). A window with any other row goes round by round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from engine.host.request import RequestOutput
from engine.host.scheduled import SchedulerOutput
from engine.host.sequence import Sequence, SequenceStatus

if TYPE_CHECKING:
    from engine.device.runner import StepOutput
    from engine.host.output import OutputStage


def is_plain(seq: Sequence) -> bool:
    """Whether `seq`'s window can land a row at a time: nothing asked per token."""
    sampling = seq.sampling
    return (seq.reasoning is None and seq.matcher is None and sampling.logprobs is None
            and not sampling.output_logits and not seq.prompt_logprobs)


def lands_by_row(scheduled: SchedulerOutput) -> bool:
    return all(is_plain(item.seq) for item in scheduled.scheduled)


def land_window(stage: OutputStage, scheduled: SchedulerOutput, steps: list[StepOutput]) -> list[RequestOutput]:
    """One output per row of the window that gained tokens or finished, in row order."""
    tokens = np.stack([step.tokens for step in steps], axis=1).tolist()  # [rows, rounds]
    mirostat = np.stack([step.mirostat_mu for step in steps], axis=1).tolist()
    outputs = []
    for index, item in enumerate(scheduled.scheduled):
        seq = item.seq
        if seq.status is not SequenceStatus.RUNNING:  # finished while the window ran
            continue
        try:
            output = land_row(stage, seq, tokens[index], mirostat[index])
        except Exception as error:
            if stage.on_fault is None:
                raise
            stage.on_fault(seq, error)
            continue
        outputs.append(output)
    return outputs


def land_row(stage: OutputStage, seq: Sequence, tokens: list[int], mirostat) -> RequestOutput:
    """`seq`'s tokens of the window: kept up to the first that ends it, then its output."""
    ends = seq.end_token_ids
    ended = None if ends.isdisjoint(tokens) else next(index for index, token in enumerate(tokens) if token in ends)
    limit = min(seq.stop.max_tokens - seq.num_output_tokens, stage.max_model_len - seq.num_tokens) - 1
    shown = tokens[:min(ended if ended is not None else len(tokens), max(limit + 1, 0))]
    # Each token's text where a stop string needs to know which token completed it.
    pieces = seq.detokenizer.push_each(shown) if seq.stop_matcher.stops else [seq.detokenizer.push(shown)]
    scan, stopped_at = seq.stop_matcher.feed_pieces(pieces)
    if stopped_at is not None:
        return finish(stage, seq, tokens[:stopped_at + 1], "stop", scan.text, scan.stop, mirostat)
    if ended is not None and ended <= limit:
        token = tokens[ended]
        stop_token = token if token in seq.stop.token_ids else None  # None: EOS
        return finish(stage, seq, tokens[:ended + 1], "stop", scan.text, stop_token, mirostat)
    if limit < len(tokens):
        return finish(stage, seq, tokens[:limit + 1], "length", scan.text, None, mirostat)
    advance(stage, seq, tokens, mirostat)
    return stage.emit(seq, tokens, scan.text)


def advance(stage: OutputStage, seq: Sequence, tokens: list[int], mirostat) -> None:
    """`seq` after the window's rounds that kept `tokens`: its Mirostat state as the last of
    them left it, the tokens appended and computed (the scheduler's update, once)."""
    seq.mirostat_mu = mirostat[len(tokens) - 1]
    stage.scheduler.advance(seq, tokens)


def finish(stage: OutputStage, seq: Sequence, tokens: list[int], reason: str, text: str,
           stop_reason, mirostat) -> RequestOutput:
    advance(stage, seq, tokens, mirostat)
    return stage.finish(seq, tokens, reason, text, stop_reason)
