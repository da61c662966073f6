"""Beam search (host side): a request's beams are ordinary decode rows; the host picks the
next beams from all their candidates at once (engine/sampling/beams.py makes those).

One search starts from its prompt's sequence, the single root beam. Each step every live
beam's row proposes its best BEAM_CANDIDATES tokens; once every live beam has proposed,
`select` ranks all (beam, token) pairs by the search type's key and walks the best
2 x num_beams of them, as Hugging Face's beam search does: an end token whose rank is
below num_beams finishes a hypothesis (the beam with that token), any other pair becomes
a new beam, until num_beams new beams are found. Scores are summed logprobs; a hypothesis
ranks by score / (its output length, end token included) ** length_penalty.

The search ends when num_beams hypotheses are in and either `early_stopping` is set or no
running beam's normalized score could beat the worst of them (Hugging Face's heuristic);
when the beams reach max_tokens or the engine's length limit (the running beams then count
as hypotheses, finish reason "length"); or, with stop token ids, when every running beam
contains one (Friendli's rule: the beams then end after their first stop token).

This module is the search's own state and choices; engine/host/beam_step.py carries them out
on the scheduler (forked sequences over shared pages) and makes the search's output.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from engine.host.request import BEAM_MODES, SEED_MODULUS, BeamSearchParams
from engine.host.sequence import Sequence

DETERMINISTIC, NAIVE_SAMPLING, STOCHASTIC = (BEAM_MODES[name] for name in ("DETERMINISTIC", "NAIVE_SAMPLING",
                                                                           "STOCHASTIC"))
MAX_EXPONENT = 700.0  # e ** 709 is near the largest double
BEAM_SEED_SALT = 0x6265616D  # sets beam seeds apart from choice seeds (engine/host/request.py choice_seeds)


@dataclass
class Beam:
    """A live hypothesis: its sequence, its summed logprob and, for stochastic beam search,
    its summed sampling logprob (phi) and perturbed score."""

    seq: Sequence
    score: float = 0.0
    logprobs: list[float] = field(default_factory=list)  # per output token
    phi: float = 0.0
    perturbed: float = 0.0  # the root's is 0 (Kool et al.)


@dataclass(frozen=True)
class CandidateRow:
    """One beam row's candidates, as the sampler ranked them (NumPy arrays, best first)."""

    token_ids: np.ndarray
    logprobs: np.ndarray
    sampling_logprobs: np.ndarray
    keys: np.ndarray


def candidate_row(candidates, index: int) -> CandidateRow:
    """Row `index` of a step's BeamCandidates (host copies)."""
    return CandidateRow(**{f.name: getattr(candidates, f.name)[index] for f in dataclasses.fields(CandidateRow)})


@dataclass(frozen=True)
class Candidate:
    """A (beam, next token) pair, ranked by `key`."""

    key: float
    beam: Beam
    token: int
    logprob: float
    sampling_logprob: float


@dataclass(frozen=True)
class Hypothesis:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str

    def score(self, length_penalty: float) -> float:
        return length_normalized(sum(self.logprobs), len(self.token_ids), length_penalty)


def length_normalized(total_logprob: float, length: int, length_penalty: float) -> float:
    """total_logprob / length ** length_penalty, as a power of e whose exponent is clamped:
    the request's bounds keep it finite, and this keeps a float power from ever raising
    OverflowError on the engine thread."""
    exponent = min(max(length_penalty * math.log(max(length, 1)), -MAX_EXPONENT), MAX_EXPONENT)
    return total_logprob / math.exp(exponent)


def beam_seed(seed: int, slot: int) -> int:
    """The seed of the beam in `slot`: distinct per slot, so beams draw independent noise."""
    return seed if slot == 0 else hash((seed, slot, BEAM_SEED_SALT)) % SEED_MODULUS  # ints hash alike in every process


def perturbed_child(parent: float, row_max: float, child: float) -> float:
    """Kool et al.'s conditioned Gumbel: the child's perturbed score given that the largest
    of its siblings' (`row_max`) equals the parent's, -log(e^-parent - e^-row_max + e^-child),
    as parent - softplus(parent - child + log(1 - e^(child - row_max))), which keeps its
    precision where the exponentials would overflow or cancel (their appendix)."""
    with np.errstate(divide="ignore"):  # the best child: log(0) = -inf, and the result is the parent's
        u = parent - child + log1mexp(min(child - row_max, 0.0))
    return float(parent - np.logaddexp(0.0, u))


def log1mexp(x: float) -> float:
    """log(1 - e^x) for x <= 0, precise near 0 and far below it."""
    return float(np.log(-np.expm1(x)) if x > -0.6931 else np.log1p(-np.exp(x)))


class BeamSearch:
    """The beams, candidates and finished hypotheses of one beam-search request."""

    def __init__(self, root: Sequence, params: BeamSearchParams, eos_token_ids: frozenset[int],
                 max_model_len: int) -> None:
        self.params = params
        self.request_id = root.request_id
        self.seed = root.seed
        self.root = root
        temperature = root.sampling.temperature
        # Sampling types without a temperature have nothing to draw: they are deterministic.
        self.mode = BEAM_MODES[params.search_type] if temperature > 0 else DETERMINISTIC
        self.temperature = temperature if temperature > 0 else 1.0
        self.end_token_ids = eos_token_ids  # finish a hypothesis
        self.stop_token_ids = frozenset(root.stop.token_ids)  # end the search once in every beam
        self.max_model_len = max_model_len
        self.beams = [Beam(root)]
        self.hypotheses: list[Hypothesis] = []
        self.proposals: dict[int, CandidateRow] = {}  # by id(seq)
        self.finished = False
        root.beam = self

    @property
    def sequences(self) -> list[Sequence]:
        return [beam.seq for beam in self.beams]

    def offer(self, seq: Sequence, candidates: CandidateRow) -> None:
        """Record a beam's candidates (a row of BeamCandidates, NumPy arrays)."""
        self.proposals[id(seq)] = candidates

    @property
    def ready(self) -> bool:
        """Whether every live beam has proposed its candidates for this step."""
        return not self.finished and all(id(beam.seq) in self.proposals for beam in self.beams)

    def ranked(self) -> list[Candidate]:
        """Every live beam's candidates by global key, best first (banned tokens left out)."""
        candidates = []
        for beam in self.beams:
            row = self.proposals[id(beam.seq)]
            for key, token, logprob, sampling_logprob in zip(row.keys, row.token_ids, row.logprobs,
                                                              row.sampling_logprobs):
                if math.isfinite(key) and math.isfinite(logprob):
                    candidates.append(Candidate(self._global_key(beam, float(key), float(row.keys[0])), beam,
                                                int(token), float(logprob), float(sampling_logprob)))
        return sorted(candidates, key=lambda candidate: -candidate.key)

    def _global_key(self, beam: Beam, key: float, row_max: float) -> float:
        if self.mode == NAIVE_SAMPLING:
            return beam.score / self.temperature + key
        if self.mode == STOCHASTIC:
            return perturbed_child(beam.perturbed, beam.phi + row_max, beam.phi + key)
        return beam.score + key

    def select(self) -> list[Candidate]:
        """The next beams' (parent, token) pairs, best first; finished hypotheses recorded."""
        num_beams = self.params.num_beams
        chosen: list[Candidate] = []
        for rank, candidate in enumerate(self.ranked()[: 2 * num_beams]):
            if candidate.token in self.end_token_ids:
                if rank < num_beams:
                    self._add_hypothesis(self.extended(candidate), "stop")
                continue
            chosen.append(candidate)
            if len(chosen) == num_beams:
                break
        self.proposals.clear()
        return chosen

    def extended(self, candidate: Candidate) -> tuple[list[int], list[float]]:
        beam = candidate.beam
        return beam.seq.output_token_ids + [candidate.token], beam.logprobs + [candidate.logprob]

    def _add_hypothesis(self, extended: tuple[list[int], list[float]], reason: str) -> None:
        """Keep the num_beams best hypotheses."""
        token_ids, logprobs = extended
        self.hypotheses.append(Hypothesis(token_ids, logprobs, reason))
        self.hypotheses.sort(key=lambda hypothesis: -hypothesis.score(self.params.length_penalty))
        del self.hypotheses[self.params.num_beams:]

    def is_done(self, chosen: list[Candidate]) -> bool:
        """Whether the hypotheses are final: none can still be beaten, or nothing runs on."""
        if not chosen:
            return True
        if len(self.hypotheses) < self.params.num_beams:
            return False
        if self.params.early_stopping:
            return True
        worst = self.hypotheses[-1].score(self.params.length_penalty)
        length = len(chosen[0].beam.seq.output_token_ids) + 1
        best_running = max(candidate.beam.score + candidate.logprob for candidate in chosen)
        return length_normalized(best_running, length, self.params.length_penalty) <= worst

    def reached_limit(self, chosen: list[Candidate]) -> bool:
        """Whether the new beams are as long as max_tokens or the engine allows."""
        seq = chosen[0].beam.seq
        return (len(seq.output_token_ids) + 1 >= seq.stop.max_tokens
                or seq.num_tokens + 1 >= self.max_model_len)

    def all_stopped(self, chosen: list[Candidate]) -> bool:
        """Friendli's rule: every running beam contains a stop token id."""
        return bool(self.stop_token_ids) and all(
            any(token in self.stop_token_ids for token in extended)
            for extended in (self.extended(candidate)[0] for candidate in chosen))

    def close(self, running: list[tuple[list[int], list[float]]], reason: str) -> None:
        """End the search; `running` (the beams' outputs) join the hypotheses."""
        for extended in running:
            self._add_hypothesis(extended, reason)
        self.finished = True


def cut_at_stop(extended: tuple[list[int], list[float]], stop_token_ids: frozenset[int]):
    """The output up to and including its first stop token."""
    token_ids, logprobs = extended
    end = next(index for index, token in enumerate(token_ids) if token in stop_token_ids) + 1
    return token_ids[:end], logprobs[:end]
