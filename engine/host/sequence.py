"""Sequence: one request's tokens, its place in the KV cache, and its output state.

Host bookkeeping only: ints, lists and small objects, never arrays. Everything the engine
keeps per request lives here, so nothing needs a dict beside it keyed by request id.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from engine.host.adapters import adapter_salt
from engine.host.embeddings import cache_salt, sorted_replacements
from engine.host.routing_replay import salted
from engine.host.tenancy import isolated
from engine.text.reasoning import ReasoningTrack
from engine.text.stop_strings import StopStringMatcher

if TYPE_CHECKING:  # types only: at run time host bookkeeping imports neither NumPy nor tokenizers
    from llguidance import LLMatcher

    from engine.loader.lora import LoraAdapter
    from engine.host.request import EmbeddingReplacement, PromptTokenLogprob, Request, SamplingParams, StopCriteria
    from engine.text.detokenizer import IncrementalDetokenizer


class SequenceStatus(enum.Enum):
    WAITING = "waiting"  # queued, or preempted and queued again; holds no pages
    RUNNING = "running"  # admitted; holds pages for its computed tokens
    FINISHED = "finished"  # done or aborted; holds no pages


class Sequence:
    """A request being generated: prompt plus outputs, and how much of it the cache holds.

    `token_ids` is the prompt followed by the generated tokens, one list that only grows.
    `num_computed_tokens` of them have their KV in the cache, in the pages of `block_table`
    (token at position p lives in slot block_table[p // page_size] * page_size + p % page_size).
    `block_table` and `block_hashes` belong to the BlockManager; the scheduler owns the
    status and counts; the output stage (engine/host/output.py) owns the detokenizer, the stop
    matcher, the grammar matcher, the Mirostat state and the prompt logprobs.
    """

    def __init__(
        self, request_id: str, prompt_token_ids: list[int], sampling: SamplingParams, seed: int,
        stop: StopCriteria, end_token_ids: frozenset[int] = frozenset(),
        detokenizer: IncrementalDetokenizer | None = None, matcher: LLMatcher | None = None,
    ) -> None:
        self.request_id = request_id
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(self.token_ids)
        self.sampling = sampling
        self.stop = stop
        self.seed = seed  # resolved: sampling.seed, or the one the engine picked
        self.status = SequenceStatus.WAITING
        self.num_computed_tokens = 0
        self.block_table: list[int] = []  # pages holding this sequence's KV, in order
        self.block_hashes: list[bytes] = []  # chained hashes of the leading pages in the prefix cache
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache at first admission
        self.num_preemptions = 0
        self.arrival = 0  # order in which the scheduler received it (set by Scheduler.add)
        self.finish_reason: str | None = None  # "stop", "length", "abort", ... once finished
        # Output state. The end-token set is built once here: the sampler reads it every step.
        self.end_token_ids = end_token_ids  # EOS (unless ignore_eos) and the stop token ids
        self.detokenizer = detokenizer  # None only for sequences that never reach the output stage
        self.stop_matcher = StopStringMatcher(self.stop.strings)
        self.mirostat_mu = 2.0 * sampling.mirostat_target  # Mirostat v2 starts at twice the target
        self.prompt_logprobs: dict[int, PromptTokenLogprob] = {}  # by position, until the first output
        self.matcher = matcher  # the grammar's llguidance matcher, following the output (None: free text)
        # Speculation (engine/host/speculation.py): the predicted output, where the output stands
        # in it (its index minus the output's length), and the drafts verified per position.
        self.prediction: tuple[int, ...] = ()
        self.prediction_shift = 0
        self.drafts_proposed: list[int] = []  # by draft position: tokens proposed there
        self.drafts_accepted: list[int] = []  # by draft position: tokens the output kept
        # Replaced input embeddings by position (engine/host/embeddings.py), and the root of the
        # page-hash chain they imply (b"": the prefix cache's plain root).
        self.embeddings: tuple[EmbeddingReplacement, ...] = ()
        self.embedding_positions: list[int] = []
        self.cache_salt = b""
        # A replayed routing by prompt position (engine/host/routing_replay.py); () for none.
        self.routing_replay: tuple[tuple[int, ...] | None, ...] = ()
        self.beam = None  # the BeamSearch this sequence is a beam of (engine/host/beam_search.py)
        self.reasoning: ReasoningTrack | None = None  # where the output stands in its thinking section
        # Tenancy (engine/host/tenancy.py): the priority tier, and the session whose cached pages
        # the block manager keeps in preference (None: none).
        self.priority = False
        self.session: str | None = None
        # The LoRA adapter (engine/host/adapters.py) and, while running, its device slot (-1: none).
        self.adapter: LoraAdapter | None = None
        self.adapter_slot = -1

    @classmethod
    def from_request(cls, request: Request, seed: int, eos_token_ids: frozenset[int] = frozenset(),
                     detokenizer: IncrementalDetokenizer | None = None, matcher: LLMatcher | None = None) -> Sequence:
        """The sequence of `request`, with its end tokens: its stop token ids, plus
        `eos_token_ids` unless it ignores EOS."""
        stop = request.stop
        end_token_ids = frozenset(stop.token_ids) | (frozenset() if stop.ignore_eos else eos_token_ids)
        seq = cls(request.request_id, request.prompt_token_ids, request.sampling, seed, stop,
                  end_token_ids, detokenizer, matcher)
        seq.prediction = tuple(request.prediction)
        seq.set_embeddings(request.embeddings)
        seq.routing_replay = tuple(request.routing_replay)
        seq.cache_salt = salted(seq.cache_salt, seq.routing_replay)
        seq.reasoning = ReasoningTrack(request.reasoning) if request.reasoning is not None else None
        seq.cache_salt = isolated(seq.cache_salt, request.cache_isolation)
        seq.priority, seq.session = request.priority, request.session
        seq.adapter = request.adapter
        seq.cache_salt = adapter_salt(seq.cache_salt, request.adapter)
        return seq

    def set_embeddings(self, replacements: tuple[EmbeddingReplacement, ...]) -> None:
        """Replace the input embeddings of these prompt positions (before admission)."""
        self.embeddings = sorted_replacements(replacements)
        self.embedding_positions = [replacement.position for replacement in self.embeddings]
        self.cache_salt = cache_salt(self.embeddings)

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, {self.status.name}, tokens={self.num_tokens}, "
            f"computed={self.num_computed_tokens}, pages={len(self.block_table)})"
        )

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.token_ids[: self.num_prompt_tokens]

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        """Tokens whose KV is not in the cache yet (at least 1 while the sequence runs)."""
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def last_token_id(self) -> int:
        return self.token_ids[-1]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def needs_sample_after(self, num_new_tokens: int) -> bool:
        """Whether computing the next `num_new_tokens` tokens reaches the end and so samples one
        (never for max_tokens 0, which only computes the prompt)."""
        reaches_end = self.num_computed_tokens + num_new_tokens == len(self.token_ids)
        return reaches_end and self.stop.max_tokens > 0

    @property
    def is_prefill_only_done(self) -> bool:
        """A max_tokens 0 sequence, still running, whose whole prompt is computed."""
        return (self.stop.max_tokens == 0 and self.status is SequenceStatus.RUNNING
                and self.num_computed_tokens == self.num_prompt_tokens)

    def record_draft(self, num_proposed: int, num_accepted: int) -> None:
        """Tally one verified draft: its first `num_accepted` tokens were kept."""
        missing = num_proposed - len(self.drafts_proposed)
        self.drafts_proposed += [0] * missing
        self.drafts_accepted += [0] * missing
        for position in range(num_proposed):
            self.drafts_proposed[position] += 1
            self.drafts_accepted[position] += position < num_accepted

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
