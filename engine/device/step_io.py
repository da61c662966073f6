"""What a step carries across the host/device boundary: the runner's rows in (`RowPlan`), the
steps in flight (`InFlight`), and their results back on the host (`StepOutput`)."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np

from engine.device.batch import BatchInputs
from engine.host.request import EmbeddingReplacement
from engine.sampling.beams import BeamCandidates
from engine.sampling.inputs import RowSampling
from engine.sampling.logprobs import PromptLogprobs, TokenLogprobs


@dataclass
class RowPlan:
    """One sequence's share of a step: tokens to compute from `start`, and how to sample."""

    token_ids: list[int]
    start: int  # position of token_ids[0] (= tokens of this sequence already in the cache)
    block_table: list[int]
    sampling: RowSampling | None = None  # None: nothing is sampled for this row this step
    next_token_ids: list[int] | None = None  # per token, the prompt token after it (-1: none), for prompt logprobs
    # Input embeddings for some of token_ids (by their positions in the sequence), in place of
    # the tokens' own (engine/host/embeddings.py).
    embeddings: tuple[EmbeddingReplacement, ...] = ()
    # A replayed routing for token_ids (engine/host/routing_replay.py): [tokens, layers x
    # experts per token], -1 where the router picks; None: it picks everywhere.
    forced_experts: np.ndarray | None = None
    adapter_slot: int = -1  # the LoRA adapter slot the row runs with (engine/device/lora.py); -1: the base

    @property
    def sample(self) -> bool:
        return self.sampling is not None


@dataclass(frozen=True)
class RowNeeds:
    """What collecting the rows' steps copies back: the same for every window of a chain,
    so found once (a pass over the rows costs the host at every window)."""

    sampled: np.ndarray  # [rows] bool: the rows that sample
    logprobs: bool  # some row asked for logprobs or the sampled tokens' logits
    beams: bool  # some row is a beam


def row_needs(rows: list[RowPlan]) -> RowNeeds:
    samplings = [row.sampling for row in rows]
    present = [sampling for sampling in samplings if sampling is not None]
    return RowNeeds(sampled=np.asarray([sampling is not None for sampling in samplings], bool),
                    logprobs=any(s.params.logprobs is not None or s.params.output_logits for s in present),
                    beams=any(s.beam_mode for s in present))


@dataclass
class InFlight:
    """Steps dispatched to the device and not yet collected (ModelRunner.dispatch)."""

    rows: list[RowPlan]
    batch: BatchInputs  # the host batch the steps started from (its bucket, its prompt rows)
    num_steps: int
    results: object  # device arrays: each step's SampleResult, stacked
    prompt: object  # device arrays: the first step's prompt logprobs
    next_batch: BatchInputs  # on the device: the inputs of the step after the last
    needs: RowNeeds | None = None  # row_needs(rows), when known


@dataclass
class StepOutput:
    """Host copies of one step's results, one row per RowPlan."""

    tokens: np.ndarray  # [rows] int32, -1 where nothing was sampled
    logprobs: TokenLogprobs | None  # NumPy arrays [rows, ...], raw logits too; None when no row asked
    mirostat_mu: np.ndarray  # [rows] float32
    prompt_logprobs: list[PromptLogprobs | None]  # per row: NumPy arrays over its tokens
    beams: BeamCandidates | None = None  # NumPy arrays [rows, candidates]; None when no beam row


def token_spans(rows: list[RowPlan]) -> list[slice]:
    """Where each row's tokens lie in the batch, in row order: every single-token row first,
    then the rows of several tokens (so that the first `rows` tokens hold every decode)."""
    order = sorted(range(len(rows)), key=lambda index: len(rows[index].token_ids) > 1)
    spans: list[slice] = [slice(0)] * len(rows)
    cursor = 0
    for index in order:
        spans[index] = slice(cursor, cursor + len(rows[index].token_ids))
        cursor = spans[index].stop
    return spans


def host_copy(tree):
    """NumPy copies of a tree of device arrays. On a multi-host mesh the step's results are
    replicated over devices some of which belong to other processes: read this one's copy."""
    def local(array):
        if array.is_fully_addressable:
            return array
        assert array.sharding.is_fully_replicated, array.sharding
        return array.addressable_data(0)
    return jax.device_get(jax.tree_util.tree_map(local, tree))
