"""What a caller gives the engine (Request: SamplingParams, StopCriteria) and what it gets back (RequestOutput)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.sampling.params import SamplingParams, bounded
from engine.text.grammar import Grammar
from engine.text.reasoning import Reasoning

if TYPE_CHECKING:  # host bookkeeping imports no NumPy at run time
    from engine.loader.lora import LoraAdapter

__all__ = ["BeamResult", "BeamSearchParams", "EmbeddingReplacement", "Grammar", "PromptTokenLogprob", "Request", "RequestOutput", "SamplingParams", "StopCriteria", "SpeculationCounts",
           "TokenLogprob", "choice_seeds"]


@dataclass(frozen=True)
class StopCriteria:
    """When a request's generation ends (engine/host/output.py checks them after every token)."""

    max_tokens: int = bounded(16, low=0, high=math.inf)  # most tokens to generate
    # Length floors: EOS and stop tokens are banned until both are reached.
    min_tokens: int = bounded(0, low=0, high=math.inf)
    min_total_tokens: int = bounded(0, low=0, high=math.inf)  # prompt and output together
    # Text that ends the output, itself excluded from the text (the token that completed it
    # stays among the token ids).
    strings: tuple[str, ...] = ()
    token_ids: tuple[int, ...] = ()  # end generation besides the model's EOS tokens
    ignore_eos: bool = False


SEED_MODULUS = 2**31 - 1


def choice_seeds(seed: int | list[int] | None, n: int, draw) -> list[int]:
    """One seed per choice of an n-choice request.

    A list (Friendli) gives each choice its own seed and must have n entries. A single seed
    gives choice i the seed derived from (seed, i): distinct and reproducible streams, the
    first equal to a one-choice request's. None draws each choice's seed with `draw()`.
    """
    if isinstance(seed, list):
        if len(seed) != n:
            raise ValueError(f"seed lists one seed per choice: expected {n}, got {len(seed)}")
        return list(seed)
    if seed is None:
        return [draw() for _ in range(n)]
    return [seed] + [hash((seed, i)) % SEED_MODULUS for i in range(1, n)]


# Each beam search type and the row mode the sampler knows it by (engine/sampling/beams.py; 0: no beam).
BEAM_MODES = {"DETERMINISTIC": 1, "NAIVE_SAMPLING": 2, "STOCHASTIC": 3}
BEAM_SEARCH_TYPES = tuple(BEAM_MODES)
MAX_BEAMS = 31  # Friendli's bound; the sampler computes 2 x this many candidates per beam
# Scores divide by length ** length_penalty: at this bound the power stays a finite double
# for any length a model can reach (2**20 ** 10 = 2**200), where 1e300 overflowed.
MAX_LENGTH_PENALTY = 10.0


@dataclass(frozen=True)
class BeamSearchParams:
    """A beam search (engine/host/beam_search.py): `num_beams` hypotheses kept per step, each
    finished one scored by its summed logprob over (output length ** length_penalty)."""

    num_beams: int = bounded(1, low=1, high=MAX_BEAMS)
    length_penalty: float = bounded(1.0, low=-MAX_LENGTH_PENALTY, high=MAX_LENGTH_PENALTY, integer=False)
    # Stop once num_beams hypotheses have finished, rather than once no running beam can
    # still beat the worst of them.
    early_stopping: bool = False
    search_type: str = "DETERMINISTIC"  # one of BEAM_SEARCH_TYPES

    def __post_init__(self) -> None:
        if self.search_type not in BEAM_SEARCH_TYPES:
            raise ValueError(f"beam search type must be one of {', '.join(BEAM_SEARCH_TYPES)}")
        if not 1 <= self.num_beams <= MAX_BEAMS:
            raise ValueError(f"num_beams must lie in [1, {MAX_BEAMS}]")
        if not abs(self.length_penalty) <= MAX_LENGTH_PENALTY:  # NaN fails too
            raise ValueError(f"length_penalty must lie in [{-MAX_LENGTH_PENALTY:g}, {MAX_LENGTH_PENALTY:g}]")


@dataclass(frozen=True)
class BeamResult:
    """One finished hypothesis of a beam search, best first in RequestOutput.beams."""

    token_ids: list[int]  # generated ids, the end token included
    text: str  # their text, without the text of an end token
    score: float  # cumulative logprob / (len(token_ids) ** length_penalty)
    cumulative_logprob: float
    finish_reason: str  # "stop" (an end token) or "length"


@dataclass
class Request:
    """One generation: the prompt's token ids, how to sample, when to stop, and the
    grammar its output must follow (None: any text)."""

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: StopCriteria = field(default_factory=StopCriteria)
    grammar: Grammar | None = None
    # Tokens the output is expected to follow (a predicted output): drafts to verify, never
    # forced; the output is what it would be without them (engine/host/speculation.py).
    prediction: tuple[int, ...] = ()
    # Input embeddings that replace the token embeddings at these prompt positions (Friendli's
    # embedding_to_replace): each one hidden_size floats (engine/host/embeddings.py).
    embeddings: tuple[EmbeddingReplacement, ...] = ()
    # Rollout Routing Replay (engine/host/routing_replay.py): per prompt position from the
    # first, its experts layer by layer (layers x k ids) to use instead of the router's pick;
    # None where the router picks. Mixture-of-experts models only.
    routing_replay: tuple[tuple[int, ...] | None, ...] = ()
    beam: BeamSearchParams | None = None  # a beam search instead of one sampled output
    # The model's thinking section (engine/text/reasoning.py): its text kept apart from the
    # answer, its budget enforced. None: the output is all answer.
    reasoning: Reasoning | None = None
    # Many tenants (engine/host/tenancy.py): the priority tier, scheduled ahead of the default
    # tier and preempting it for room; a salt that isolates its prefix-cache pages (b"": the
    # shared cache); the session whose cached pages are kept in preference (None: none).
    priority: bool = False
    cache_isolation: bytes = b""
    session: str | None = None
    # A LoRA adapter to run with (engine/host/adapters.py); None: the base model alone.
    adapter: LoraAdapter | None = None


@dataclass(frozen=True)
class EmbeddingReplacement:
    """The input embedding of prompt position `position`, in place of its token's."""

    position: int
    values: tuple[float, ...]  # [hidden_size]


@dataclass(frozen=True)
class SpeculationCounts:
    """Draft tokens verified for one request so far: how many the output kept, how many it
    did not, and per draft position (1st, 2nd, ...) how many were proposed and kept."""

    num_accepted: int = 0
    num_rejected: int = 0
    proposed_by_position: tuple[int, ...] = ()
    accepted_by_position: tuple[int, ...] = ()

    def acceptance_by_position(self) -> list[float]:
        return [kept / proposed for kept, proposed in zip(self.accepted_by_position, self.proposed_by_position)]


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's log probabilities: under the model, and under the processed
    sampling distribution (Fireworks' logprob and sampling_logprob), with its rank and the
    most likely alternatives under the model (as many as the request asked for)."""

    token_id: int
    logprob: float
    sampling_logprob: float
    rank: int
    top: tuple[tuple[int, float], ...]
    # The experts of the forward that gave this logprob, layer by layer (layers x k ids),
    # for a mixture-of-experts model (engine/host/routing_replay.py); None otherwise.
    routing: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PromptTokenLogprob:
    """A prompt token's log probability given the tokens before it."""

    token_id: int
    logprob: float
    rank: int
    is_greedy: bool  # it is the model's most likely next token (lm-eval's is_greedy)
    top: tuple[tuple[int, float], ...]
    routing: tuple[int, ...] | None = None  # as TokenLogprob's: the previous token's forward


@dataclass
class RequestOutput:
    """One step's news for one request: the tokens it gained, and whether it finished.

    `text` is the newly safe text: that of new_token_ids (and of earlier tokens held back),
    held back while it ends inside a UTF-8 character or could still begin a stop string,
    and emitted once it cannot or the request ends. A stop string and everything after it
    are never emitted, nor the text of an end token (EOS or a stop token id); the token
    that completed a stop string is still among new_token_ids, with its logprob."""

    request_id: str
    new_token_ids: list[int]
    text: str
    finish_reason: str | None  # "stop", "length", "abort", "error", or None while running
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens served from the prefix cache
    num_output_tokens: int  # all generated so far
    seed: int = 0  # the seed actually used
    logprobs: list[TokenLogprob] | None = None  # one per new token, when the request asked
    # With the first output of a request that asked: one entry per prompt token after the
    # first (whose probability has no context to condition on).
    prompt_logprobs: list[PromptTokenLogprob] | None = None
    # What ended a "stop": the stop string matched, or the request's stop token id (None
    # for EOS, and for every other finish reason).
    stop_reason: str | int | None = None
    speculation: SpeculationCounts | None = None  # drafts verified so far (None: none proposed)
    logits: list[float] | None = None  # the raw model logit of each new token, when the request asked
    # The newly safe text of the model's thinking (engine/text/reasoning.py), apart from `text`,
    # and how many output tokens its thinking section holds so far (tags included).
    reasoning_text: str = ""
    num_reasoning_tokens: int = 0
    # A beam search's hypotheses, best first, with its one (final) output; the output's own
    # tokens and text are the best one's.
    beams: list[BeamResult] | None = None
    # Why a request failed on its own (finish_reason "error": engine/host/faults.py); the engine served on.
    error: BaseException | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
