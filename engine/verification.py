"""Verifying drafts: k guessed tokens checked in one step, as k more ordinary decode rows.

A sequence computing its last token t at position p (a decode, or its prompt's last chunk),
with draft d1..dk (engine/host/speculation.py),
gets k more one-token rows in the same step: row i computes d_i at position p + i over the
sequence's own block table, and samples the token after it as if d1..d_i were already
output (its penalty history, length floors and bans include them). Every row writes its
KV before any attends (engine/models/llama.py), so row i reads t, d1..d_{i-1} from the cache like
any decode. The step's shapes are those of any batch of decodes: no new executable.

The rows sample s0..sk, s_i the token after d_i. The output keeps s0, then s_i for as long
as the draft agreed (s_{i-1} = d_i): the tokens plain decoding would have drawn, because
each row's draw depends only on the request's seed and the position (engine/sampling/draw.py).
So greedy and seeded outputs are identical with and without drafts. For a draft of fixed
tokens this is rejection sampling: d_i is kept with probability p(d_i), and otherwise the
token comes from p without d_i, which leaves the output distribution unchanged.

The kept tokens then pass through the output stage one round at a time, exactly like the
rounds of a decode window (engine/host/decode_window.py): stops, limits and detokenization apply
per token, and KV written for tokens that were not kept is overwritten later.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import numpy as np

from engine.config import EngineConfig
from engine.device.runner import RowPlan, StepOutput
from engine.host.block_manager import BlockManager
from engine.host.scheduled import ScheduledSequence, SchedulerOutput
from engine.host.sequence import Sequence
from engine.host.speculation import SpeculationConfig, propose
from engine.sampling import RowSampling
from engine.text.reasoning import steps_with_fixed_mask


@dataclass(frozen=True)
class Verification:
    """One sequence's draft in a step: its decode row, and the rows checking the draft."""

    seq: Sequence
    item_index: int  # the sequence's ordinary row: a decode, or the last chunk of its prompt
    start: int  # the position of that row's last token
    draft: tuple[int, ...]
    rows: tuple[int, ...]  # row of each draft token, in draft order
    num_outputs_before: int


def can_speculate(seq: Sequence) -> bool:
    """Whether a row's draft can be checked without the host between its tokens: no grammar
    (its mask follows each token), no Mirostat (its state follows each draw), no beam
    (the host picks its next token), and no thinking-section mask about to change."""
    return (seq.matcher is None and seq.beam is None and seq.sampling.mirostat_target == 0
            and steps_with_fixed_mask(seq) != 0)


def within_fixed_mask(seq: Sequence, limit: int) -> int:
    """`limit`, lowered so that every draft row samples under the row's own mask (a thinking
    budget forces its tokens one by one: engine/text/reasoning.py)."""
    room = steps_with_fixed_mask(seq)
    return limit if room is None else min(limit, room - 1)


def plan_drafts(scheduled: SchedulerOutput, speculation: SpeculationConfig, config: EngineConfig,
                block_manager: BlockManager) -> list[Verification]:
    """Drafts for this step's decoding rows, within the step's token and row budgets, each
    with the pages it needs reserved (a draft whose pages are not free is dropped)."""
    tokens_left = config.max_num_batched_tokens - scheduled.num_batched_tokens
    rows_left = config.max_num_rows - len(scheduled.scheduled)
    next_row = len(scheduled.scheduled)
    verifications = []
    for index, item in enumerate(scheduled.scheduled):
        seq = item.seq
        if not (item.needs_sample and can_speculate(seq)):
            continue
        limit = within_fixed_mask(seq, min(tokens_left, rows_left, seq.stop.max_tokens - seq.num_output_tokens - 1,
                                           config.max_model_len - seq.num_tokens - 1))
        draft = propose(seq, speculation, limit)
        if not draft or not block_manager.can_append(seq, item.num_new_tokens + len(draft)):
            continue
        block_manager.append(seq, item.num_new_tokens + len(draft))
        rows = tuple(range(next_row, next_row + len(draft)))
        last = item.start + item.num_new_tokens - 1  # the position the row samples after
        verifications.append(Verification(seq, index, last, tuple(draft), rows, seq.num_output_tokens))
        next_row += len(draft)
        tokens_left -= len(draft)
        rows_left -= len(draft)
    return verifications


def draft_rows(verifications: list[Verification], plans: list[RowPlan]) -> list[RowPlan]:
    """The rows checking each draft, in `Verification.rows` order, sampling like the
    sequence's own row (`plans`, the step's ordinary rows) with the draft taken as output."""
    rows = []
    for verification in verifications:
        own: RowSampling = plans[verification.item_index].sampling
        for offset, token in enumerate(verification.draft, 1):
            assumed = own.token_ids + list(verification.draft[:offset])
            rows.append(RowPlan(token_ids=[token], start=verification.start + offset,
                                block_table=verification.seq.block_table,
                                sampling=dataclasses.replace(own, token_ids=assumed),
                                adapter_slot=verification.seq.adapter_slot))
    return rows


def num_kept(step: StepOutput, verification: Verification) -> int:
    """How many draft tokens the step's sampled tokens agreed with, from the first."""
    sampled = [step.tokens[verification.item_index], *(step.tokens[row] for row in verification.rows[:-1])]
    return num_agreeing(sampled, verification.draft)


def num_agreeing(tokens, draft: tuple[int, ...]) -> int:
    """The length of the longest common prefix of `tokens` and `draft`."""
    agreed = 0
    for token, drafted in zip(tokens, draft):
        if int(token) != drafted:
            break
        agreed += 1
    return agreed


def rounds(scheduled: SchedulerOutput, step: StepOutput,
           verifications: list[Verification]) -> list[tuple[SchedulerOutput, StepOutput]]:
    """The step as the rounds plain decoding would have run: the step's own rows, then one
    round per kept draft token, holding the sequences whose draft reached that far."""
    ordinary = list(range(len(scheduled.scheduled)))
    result = [(scheduled, rows_of(step, ordinary, with_prompt=True))]
    kept = {id(v): num_kept(step, v) for v in verifications}
    for offset in range(1, max(kept.values(), default=0) + 1):
        group = [v for v in verifications if kept[id(v)] >= offset]
        items = [ScheduledSequence(v.seq, 1, v.start + offset, True) for v in group]
        result.append((SchedulerOutput(scheduled=items), rows_of(step, [v.rows[offset - 1] for v in group])))
    return result


def record(verifications: list[Verification]) -> None:
    """Tally each draft once its rounds have landed. A draft token counts as kept when the
    output holds it in its drafted place (a stop inside the draft keeps nothing after it)."""
    for verification in verifications:
        outputs = verification.seq.output_token_ids[verification.num_outputs_before:]
        verification.seq.record_draft(len(verification.draft), num_agreeing(outputs, verification.draft))


def rows_of(step: StepOutput, indices: list[int], with_prompt: bool = False) -> StepOutput:
    """The step's results for the rows `indices`, in that order."""
    picked = np.asarray(indices, dtype=np.int64)
    logprobs = None if step.logprobs is None else jax.tree_util.tree_map(lambda a: a[picked], step.logprobs)
    prompt = [step.prompt_logprobs[index] for index in indices] if with_prompt else [None] * len(indices)
    return StepOutput(tokens=step.tokens[picked], logprobs=logprobs, mirostat_mu=step.mirostat_mu[picked],
                      prompt_logprobs=prompt)
