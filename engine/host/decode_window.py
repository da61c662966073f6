"""Decode windows: several decode steps in one device call, then their outputs in order.

When every row of a step decodes one token, the runner can run up to
`EngineConfig.max_decode_steps` rounds of forward and sample in one call (engine/device/runner.py).
This module decides how many, and replays the rounds through the output stage one at a
time, so stop strings, end tokens and limits apply exactly as for single steps: a sequence
that stops inside the window finishes there, and its later tokens are discarded with the
KV slots they were written to (its pages are freed as it finishes).

A row rules the window out when the host must see each token before the next is drawn:
its allowed-token mask changes with the output (a grammar, forced tokens, bad words, n-gram
bans, end tokens still banned by min_tokens, or a thinking section's first token or budget), or it is a beam, whose next token the host
picks (engine/host/beam_search.py).
"""

from __future__ import annotations

import dataclasses

from engine.host.block_manager import BlockManager
from engine.host.request import RequestOutput
from engine.host.scheduled import ScheduledSequence, SchedulerOutput
from engine.host.sequence import Sequence, SequenceStatus
from engine.sampling.masks import stop_bans
from engine.text.reasoning import steps_with_fixed_mask


def window_headroom(scheduled: SchedulerOutput, max_model_len: int) -> int:
    """The most decode rounds every row of `scheduled` may run from where the host stands,
    each under the mask it has now; 0: no window (a row not decoding one sampled token, or
    one whose mask needs the host at each token).

    Taken once, when the first window of a chain is scheduled, it bounds the windows chained
    behind it (Engine._chain) without another pass over the rows: each bound only shrinks by
    one a round (max_tokens, max_model_len, a thinking budget) or lifts for good (min_tokens
    passed, forced tokens spent, a thinking section ended), so it is never too large, and at
    worst a chain ends early and the next window is scheduled afresh."""
    if not all(item.num_new_tokens == 1 and item.needs_sample for item in scheduled.scheduled):
        return 0
    headroom = max_model_len
    for item in scheduled.scheduled:
        seq = item.seq
        if seq.status is not SequenceStatus.RUNNING or not mask_is_fixed(seq):
            return 0
        # No window runs past a row's max_tokens or max_model_len: those tokens would be waste.
        headroom = min(headroom, seq.stop.max_tokens - seq.num_output_tokens, max_model_len - seq.num_tokens)
        room = steps_with_fixed_mask(seq)  # nor past a thinking budget: its forced tokens need the host
        if room is not None:
            headroom = min(headroom, room)
    return max(headroom, 0)


def all_running(scheduled: SchedulerOutput) -> bool:
    """Whether no row finished (a stop, an abort) since `scheduled` was made."""
    running = SequenceStatus.RUNNING
    return all(item.seq.status is running for item in scheduled.scheduled)


def mask_is_fixed(seq: Sequence) -> bool:
    """Whether the row's allowed tokens stay as they are (all, or all but a thinking
    section's start tag) for every step of a window."""
    params = seq.sampling
    if seq.matcher is not None or seq.beam is not None or params.bad_word_tokens or params.no_repeat_ngram_size:
        return False
    if seq.num_output_tokens < len(params.forced_output_tokens) or steps_with_fixed_mask(seq) == 0:
        return False
    return not stop_bans(seq.num_output_tokens, seq.stop.min_tokens, seq.num_tokens,
                         seq.stop.min_total_tokens or None, seq.end_token_ids)


def reserve_window(block_manager: BlockManager, scheduled: SchedulerOutput, num_steps: int) -> bool:
    """Pages for `num_steps` tokens of every row (the scheduler reserved one); False, and
    nothing taken, when the free pool cannot cover them all."""
    short = [(item.seq, missing) for item in scheduled.scheduled
             if (missing := block_manager.num_missing_pages_of(item.seq, num_steps))]
    if sum(missing for _, missing in short) > block_manager.num_free_pages:
        return False
    for seq, missing in short:
        block_manager.take_pages(seq, missing)
    return True


def window_round(scheduled: SchedulerOutput, index: int) -> SchedulerOutput:
    """Round `index` of a window, as the step it stands for: each row one token further."""
    return SchedulerOutput(scheduled=[
        ScheduledSequence(item.seq, 1, item.start + index, True) for item in scheduled.scheduled])


def merge_outputs(outputs: list[RequestOutput]) -> list[RequestOutput]:
    """One output per request, in first-appearance order: tokens, text, logprobs and logits joined,
    the latest counts and finish state kept."""
    by_request: dict[str, list[RequestOutput]] = {}
    for output in outputs:
        by_request.setdefault(output.request_id, []).append(output)
    return [parts[0] if len(parts) == 1 else joined(parts) for parts in by_request.values()]


def joined(parts: list[RequestOutput]) -> RequestOutput:
    """A request's outputs of a window as one: the last's state, everyone's tokens and text,
    joined at once (pairwise, a window of 8 copied each output 7 times)."""
    last = parts[-1]
    return dataclasses.replace(
        last, new_token_ids=[token for part in parts for token in part.new_token_ids],
        text="".join([part.text for part in parts]), reasoning_text="".join([part.reasoning_text for part in parts]),
        logprobs=concatenated([part.logprobs for part in parts]),
        prompt_logprobs=next((part.prompt_logprobs for part in parts if part.prompt_logprobs), last.prompt_logprobs),
        logits=concatenated([part.logits for part in parts]))


def concatenated(lists: list[list | None]) -> list | None:
    """The lists joined; None where every one is None."""
    if all(items is None for items in lists):
        return None
    return [item for items in lists for item in items or []]
