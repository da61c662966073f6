"""Beam search carried out on the engine (engine/host/beam_search.py decides, this module does).

`land` hands a step's beam rows' candidates to their searches and steps every search whose
beams have all proposed: its next beams fork their parent's sequence (`fork`), sharing its
KV pages through the block manager's reference counts, and the one page a beam writes
next, when its parent's last page is partly filled and shared, is copied first
(`BlockManager.copy_on_write`; the copies are returned to run on the device before the
next step). A search that ends finishes its sequences and answers once (`final_output`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from engine.host.beam_search import STOCHASTIC, Beam, BeamSearch, Candidate, beam_seed, candidate_row, cut_at_stop
from engine.host.request import BeamResult, RequestOutput
from engine.host.scheduled import SchedulerOutput
from engine.host.scheduler import Scheduler
from engine.host.sequence import Sequence, SequenceStatus
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.tokenizer import Tokenizer


def land(scheduled: SchedulerOutput, candidates, scheduler: Scheduler,
         on_fault: Callable[[Sequence, BaseException], None]) -> tuple[list[tuple[int, int]], list[BeamSearch]]:
    """Offer each beam row's candidates (the step's BeamCandidates, host copies) to its
    search and step the searches that are ready: (the page copies to run, the searches that
    ended). A search whose step raises fails alone, through `on_fault` (engine/host/faults.py)."""
    searches = {}
    for index, item in enumerate(scheduled.scheduled):
        search = item.seq.beam
        if search is None or not item.needs_sample or item.seq.status is not SequenceStatus.RUNNING:
            continue
        search.offer(item.seq, candidate_row(candidates, index))
        searches[id(search)] = search
    copies, ended = [], []
    for search in (search for search in searches.values() if search.ready):
        try:
            copies += step(search, scheduler)
        except Exception as error:
            on_fault(search.root, error)
            continue
        if search.finished:
            ended.append(search)
    return copies, ended


def advance(search: BeamSearch, chosen: list[Candidate], scheduler: Scheduler) -> list[tuple[int, int]]:
    """Make `chosen` the live beams: fork each parent once per extra child, append each
    child's token, drop parents without children. Returns the page copies (source,
    destination) to run on the device before the next step writes."""
    children: dict[int, list[Candidate]] = defaultdict(list)
    for candidate in chosen:
        children[id(candidate.beam)].append(candidate)
    beams = []
    for parent in search.beams:
        kids = children.get(id(parent), [])
        if not kids:
            scheduler.finish(parent.seq, "stop")
            continue
        # Forks copy the parent before it takes its own child's token.
        seqs = [fork(parent.seq, scheduler) for _ in kids[1:]] + [parent.seq]
        for seq, candidate in zip(seqs, kids[1:] + kids[:1]):
            seq.append_token(candidate.token)
            beams.append(child_beam(search, seq, candidate))
    beams.sort(key=lambda beam: -beam.score)
    for slot, beam in enumerate(beams):
        beam.seq.seed = beam_seed(search.seed, slot)
    search.beams = beams
    return [pair for beam in beams if (pair := unshare(beam.seq, scheduler)) is not None]


def child_beam(search: BeamSearch, seq: Sequence, candidate: Candidate) -> Beam:
    parent = candidate.beam
    return Beam(seq, score=parent.score + candidate.logprob, logprobs=parent.logprobs + [candidate.logprob],
                phi=parent.phi + candidate.sampling_logprob,
                perturbed=candidate.key if search.mode == STOCHASTIC else 0.0)


def fork(parent: Sequence, scheduler: Scheduler) -> Sequence:
    """A new sequence with `parent`'s tokens and (shared) pages, next to it in the queues."""
    child = Sequence(parent.request_id, parent.prompt_token_ids, parent.sampling, parent.seed, parent.stop,
                     parent.end_token_ids)
    child.token_ids = list(parent.token_ids)
    child.num_cached_tokens = parent.num_cached_tokens
    child.beam = parent.beam
    child.set_embeddings(parent.embeddings)
    # The parent's whole salt (its routing replay and isolation too), so that a child recomputed
    # after a preemption registers its pages where the parent's are; and the parent's tenancy.
    child.routing_replay, child.cache_salt = parent.routing_replay, parent.cache_salt
    child.priority, child.session = parent.priority, parent.session
    child.adapter = parent.adapter
    scheduler.fork(parent, child)
    return child


def unshare(seq: Sequence, scheduler: Scheduler) -> tuple[int, int] | None:
    """Copy-on-write for the page `seq` writes next; without a free page, `seq` gives its
    pages back and is recomputed later instead."""
    if seq.status is not SequenceStatus.RUNNING:
        return None
    try:
        return scheduler.block_manager.copy_on_write(seq)
    except RuntimeError:
        scheduler.requeue(seq)
        return None


def step(search: BeamSearch, scheduler: Scheduler) -> list[tuple[int, int]]:
    """One selection once every beam has proposed: the page copies it needs (none once the
    search has ended, its sequences finished)."""
    chosen = search.select()
    if search.is_done(chosen):
        search.close([], "stop")
    elif search.all_stopped(chosen):
        search.close([cut_at_stop(search.extended(c), search.stop_token_ids) for c in chosen], "stop")
    elif search.reached_limit(chosen):
        search.close([search.extended(candidate) for candidate in chosen], "length")
    else:
        return advance(search, chosen, scheduler)
    for seq in search.sequences:
        scheduler.finish(seq, "stop")
    return []


def final_output(search: BeamSearch, tokenizer: Tokenizer) -> RequestOutput:
    """The search's one output: every hypothesis, best first; the best one's tokens and text."""
    penalty = search.params.length_penalty
    ends = search.end_token_ids | search.stop_token_ids
    prompt = search.root.prompt_token_ids
    beams = [BeamResult(token_ids=hypothesis.token_ids, text=text_of(tokenizer, prompt, hypothesis.token_ids, ends),
                        score=hypothesis.score(penalty), cumulative_logprob=sum(hypothesis.logprobs),
                        finish_reason=hypothesis.finish_reason)
             for hypothesis in search.hypotheses]
    best = beams[0] if beams else BeamResult([], "", 0.0, 0.0, "length")
    return RequestOutput(request_id=search.request_id, new_token_ids=list(best.token_ids), text=best.text,
                         finish_reason=best.finish_reason, num_prompt_tokens=len(prompt),
                         num_cached_tokens=search.root.num_cached_tokens, num_output_tokens=len(best.token_ids),
                         seed=search.seed, beams=beams)


def text_of(tokenizer: Tokenizer, prompt: list[int], token_ids: list[int], end_token_ids: frozenset[int]) -> str:
    """A hypothesis's text: its tokens after the prompt, an end token's own text left out."""
    if token_ids and token_ids[-1] in end_token_ids:
        token_ids = token_ids[:-1]
    detokenizer = IncrementalDetokenizer(tokenizer, prompt_ids=prompt, skip_special_tokens=True)
    return detokenizer.push(token_ids) + detokenizer.flush()
