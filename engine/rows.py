"""A scheduled chunk as the runner's row (RowPlan): its tokens, pages and sampling inputs.

The row's inputs are the request's own host work (its grammar's mask, its thinking
section's forced and banned tokens, its replaced embeddings). Where that work raises, the
request fails alone (engine/host/faults.py) and its row samples a neutral one in the step
already scheduled: the scheduler drops the token of a finished sequence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from engine.device.step_io import RowPlan
from engine.host.embeddings import replaced_between
from engine.host.grammar_masks import GrammarMasks
from engine.host.request import SamplingParams
from engine.host.routing_replay import replayed_between
from engine.host.scheduled import ScheduledSequence
from engine.host.sequence import Sequence
from engine.sampling import RowSampling
from engine.text.reasoning import answer_words, banned_tokens, forced_token


def row_plan(item: ScheduledSequence, masks: GrammarMasks,
             on_fault: Callable[[Sequence, BaseException], None]) -> RowPlan:
    """The row of one scheduled chunk; `on_fault(seq, error)` where its own inputs fail."""
    seq, start, count = item.seq, item.start, item.num_new_tokens
    row = RowPlan(token_ids=seq.token_ids[start: start + count], start=start, block_table=seq.block_table,
                  adapter_slot=seq.adapter_slot)
    try:
        return dataclasses.replace(
            row, sampling=row_sampling(seq, masks) if item.needs_sample else None,
            next_token_ids=next_prompt_ids(seq, start, count), embeddings=replaced_between(seq, start, count),
            forced_experts=forced_experts(seq, start, count))
    except Exception as error:
        on_fault(seq, error)
        return dataclasses.replace(row, sampling=neutral_sampling(seq) if item.needs_sample else None)


def forced_experts(seq: Sequence, start: int, count: int) -> np.ndarray | None:
    """The chunk's replayed routing as the batch holds it: [count, layers, k], -1 where
    the router picks (engine/host/routing_replay.py); None when nothing is replayed."""
    chunk = replayed_between(seq, start, count)
    if chunk is None:
        return None
    width = len(next(routing for routing in chunk if routing is not None))
    forced = np.full((count, width), -1, np.int32)
    for offset, routing in enumerate(chunk):
        if routing is not None:
            forced[offset] = routing
    return forced


def row_sampling(seq: Sequence, masks: GrammarMasks) -> RowSampling:
    """What the sampler needs from `seq` for the token it samples this step."""
    return RowSampling(
        params=seq.sampling, seed=seq.seed, token_ids=seq.token_ids, num_prompt_tokens=seq.num_prompt_tokens,
        end_token_ids=seq.end_token_ids, min_tokens=seq.stop.min_tokens,
        min_total_tokens=seq.stop.min_total_tokens, mirostat_mu=seq.mirostat_mu,
        grammar_words=answer_words(seq, masks.take),
        forced_token_id=forced_token(seq), banned_token_ids=banned_tokens(seq),
        beam_mode=seq.beam.mode if seq.beam is not None else 0,
    )


def next_prompt_ids(seq: Sequence, start: int, count: int) -> list[int] | None:
    """For prompt logprobs: each token's following prompt token (-1 past the prompt)."""
    if seq.sampling.prompt_logprobs is None or start >= seq.num_prompt_tokens - 1:
        return None
    follows = seq.token_ids[start + 1: min(start + count + 1, seq.num_prompt_tokens)]
    return follows + [-1] * (count - len(follows))


def neutral_sampling(seq: Sequence) -> RowSampling:
    """A greedy row that asks nothing of `seq`'s own settings: what a row whose planning
    failed samples in the step already scheduled (its token is dropped: `seq` is finished)."""
    return RowSampling(params=SamplingParams(temperature=0.0), seed=0, token_ids=list(seq.token_ids),
                       num_prompt_tokens=seq.num_prompt_tokens, end_token_ids=frozenset())
