"""The output stage: a step's results become RequestOutputs, and stopped sequences finish.

For each sampled token, in order (as vLLM checks them):
1. an end token (EOS unless the request ignores it, or one of its stop token ids) stops
   the sequence; its text is never shown;
2. a stop string completed by the token's text stops it; the output's text ends before
   the stop string, and nothing after it is ever emitted;
3. a grammar that is complete (its matcher takes no further token) stops it;
4. the limits: max_tokens, and the engine's max_model_len.
Every token kept is consumed by the sequence's grammar matcher first: the mask made it
one the grammar allows, so a matcher that refuses it is a broken constraint, and the
sequence is aborted rather than let its output go on unconstrained.
A model's thinking section (engine/text/reasoning.py) comes before all this: its tags show no
text, its thoughts' text goes to `reasoning_text` through a detokenizer of its own, and
only the limits apply to it (stop strings and grammars are the answer's).
A sequence that stops is finished through the scheduler in the same step, which frees its
KV pages before the next schedule. Text that could still begin a stop string is held back
and emitted as soon as it cannot, or when the sequence ends for another reason.

Host only: the step's arrays arrive as NumPy copies, read here element by element.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.host.request import PromptTokenLogprob, Request, RequestOutput, SpeculationCounts, TokenLogprob
from engine.host.scheduled import SchedulerOutput
from engine.host.scheduler import Scheduler
from engine.host.sequence import Sequence
from engine.text.reasoning import ANSWER, END, THOUGHT, ReasoningTrack
from engine.text.stop_strings import StopScan
from engine.text.detokenizer import IncrementalDetokenizer
from engine.text.tokenizer import Tokenizer

if TYPE_CHECKING:  # the runner imports JAX; this stage only reads its host copies
    from llguidance import LLMatcher

    from engine.device.runner import StepOutput
    from engine.sampling.logprobs import PromptLogprobs

log = logging.getLogger("flint")


class OutputStage:
    """Detokenization, stop criteria, limits and logprob packaging for every sequence."""

    def __init__(self, tokenizer: Tokenizer, scheduler: Scheduler, eos_token_ids: frozenset[int],
                 max_model_len: int, on_fault: Callable[[Sequence, BaseException], None] | None = None) -> None:
        self.tokenizer = tokenizer
        self.scheduler = scheduler
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        # Told of a sequence whose own output work raised (engine/host/faults.py); None: raise.
        self.on_fault = on_fault

    def new_sequence(self, request: Request, seed: int, matcher: LLMatcher | None = None) -> Sequence:
        """The sequence of `request`, with its end-token set, a detokenizer after its prompt
        and the matcher of its grammar."""
        detokenizer = IncrementalDetokenizer(self.tokenizer, prompt_ids=request.prompt_token_ids,
                                             skip_special_tokens=True)
        seq = Sequence.from_request(request, seed, self.eos_token_ids, detokenizer, matcher)
        if seq.reasoning is not None:
            seq.reasoning.detokenizer = IncrementalDetokenizer(self.tokenizer, prompt_ids=request.prompt_token_ids,
                                                               skip_special_tokens=True)
        return seq

    def process(self, scheduled: SchedulerOutput, step: StepOutput) -> list[RequestOutput]:
        """Record the step, append its sampled tokens (scheduler.update), check stops and
        finish what stopped. One output per sequence that gained a token or finished."""
        logprobs = self._record_rows(scheduled, step)
        sampled = [int(step.tokens[index]) for index, item in enumerate(scheduled.scheduled) if item.needs_sample]
        grown = self.scheduler.update(scheduled, sampled)
        logits = sampled_logits(scheduled, step)
        outputs = [with_logit(output, logits.get(seq.request_id)) for seq in grown
                   if (output := self._advance_alone(seq, logprobs.get(seq.request_id))) is not None]
        # A max_tokens 0 request whose prompt is computed: done, with no output token.
        return outputs + [self.finish(item.seq, [], "length") for item in scheduled.scheduled
                          if item.seq.is_prefill_only_done]

    def _advance_alone(self, seq: Sequence, logprob: TokenLogprob | None) -> RequestOutput | None:
        """`_advance`, where an error (its grammar, its detokenizer, its stop strings) fails
        `seq` alone: None then, its failure reported through `on_fault`."""
        if self.on_fault is None:
            return self._advance(seq, logprob)
        try:
            return self._advance(seq, logprob)
        except Exception as error:
            self.on_fault(seq, error)
            return None

    def aborted(self, seq: Sequence) -> RequestOutput:
        """The last output of a sequence the scheduler has just aborted: the text held back."""
        return self.emit(seq, [], self._drain(seq).text, reasoning=drain_thoughts(seq))

    def _record_rows(self, scheduled: SchedulerOutput, step: StepOutput) -> dict[str, TokenLogprob | None]:
        """Keep each row's prompt logprobs and Mirostat state; the sampled tokens' logprobs."""
        logprobs = {}
        for index, item in enumerate(scheduled.scheduled):
            seq = item.seq
            if step.prompt_logprobs[index] is not None:
                record_prompt_logprobs(seq, item.start, step.prompt_logprobs[index])
            if item.needs_sample:
                seq.mirostat_mu = float(step.mirostat_mu[index])
                logprobs[seq.request_id] = token_logprob(seq.sampling.logprobs, step, index)
        return logprobs

    def _advance(self, seq: Sequence, logprob: TokenLogprob | None) -> RequestOutput:
        """The output for `seq`'s newest token, finishing `seq` when a stop condition holds."""
        token = seq.last_token_id
        logprobs = [logprob] if logprob is not None else None
        if token in seq.end_token_ids:
            stop_token = token if token in seq.stop.token_ids else None  # None: EOS
            return self.finish(seq, [token], "stop", stop_reason=stop_token, logprobs=logprobs)
        part = seq.reasoning.advance(token) if seq.reasoning is not None else ANSWER
        if part != ANSWER:
            return self._think(seq, token, part, logprobs)
        if seq.matcher is not None and not seq.matcher.consume_token(token):
            log.error("request %s: its grammar refused token %d: %s", seq.request_id, token, seq.matcher.get_error())
            return self.finish(seq, [], "abort")
        shown = [token] if seq.reasoning is None or seq.reasoning.shows(token) else []  # a stray tag: no text
        scan = seq.stop_matcher.feed(answer_text(seq, seq.detokenizer.push(shown)))
        if scan.stopped:
            return self.finish(seq, [token], "stop", scan.text, scan.stop, logprobs)
        if seq.matcher is not None and seq.matcher.is_stopped():  # the grammar is complete
            return self.finish(seq, [token], "stop", scan.text, logprobs=logprobs)
        if seq.num_output_tokens >= seq.stop.max_tokens or seq.num_tokens >= self.max_model_len:
            return self.finish(seq, [token], "length", scan.text, logprobs=logprobs)
        return self.emit(seq, [token], scan.text, logprobs)

    def _think(self, seq: Sequence, token: int, part: str, logprobs: list[TokenLogprob] | None) -> RequestOutput:
        """The output for a token of the thinking section (`part`: START, THOUGHT or END):
        the thoughts' new text (a tag has none of its own); only the limits end it here."""
        thoughts = section_text(seq.reasoning, token, part)
        if seq.num_output_tokens >= seq.stop.max_tokens or seq.num_tokens >= self.max_model_len:
            return self.finish(seq, [token], "length", logprobs=logprobs, reasoning=thoughts)
        return self.emit(seq, [token], "", logprobs, reasoning=thoughts)

    def finish(self, seq: Sequence, tokens: list[int], reason: str, text: str = "",
               stop_reason: str | int | None = None, logprobs: list[TokenLogprob] | None = None,
               reasoning: str = "") -> RequestOutput:
        """Finish `seq` now (its pages are free when this returns) and emit the text held back.

        That text may itself complete a stop string (the detokenizer's last characters), and
        then it is cut there and the stop string is the reason, as when a token completes one."""
        tail = self._drain(seq)
        if tail.stopped:
            reason, stop_reason = "stop", tail.stop
        self.scheduler.finish(seq, reason)
        return self.emit(seq, tokens, text + tail.text, logprobs, stop_reason, reasoning + drain_thoughts(seq))

    @staticmethod
    def _drain(seq: Sequence) -> StopScan:
        """Everything still held back, as generation ends: the detokenizer's incomplete
        characters through the stop matcher, then what the matcher held (nothing after a match)."""
        scan = seq.stop_matcher.feed(answer_text(seq, seq.detokenizer.flush()))
        return scan if scan.stopped else StopScan(scan.text + seq.stop_matcher.flush())

    @staticmethod
    def emit(seq: Sequence, tokens: list[int], text: str, logprobs: list[TokenLogprob] | None = None,
             stop_reason: str | int | None = None, reasoning: str = "") -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id, new_token_ids=tokens, text=text, finish_reason=seq.finish_reason,
            num_prompt_tokens=seq.num_prompt_tokens, num_cached_tokens=seq.num_cached_tokens,
            num_output_tokens=seq.num_output_tokens, seed=seq.seed, logprobs=logprobs,
            prompt_logprobs=take_prompt_logprobs(seq), stop_reason=stop_reason,
            speculation=speculation_counts(seq), reasoning_text=reasoning,
            num_reasoning_tokens=seq.reasoning.num_tokens if seq.reasoning is not None else 0,
        )


def answer_text(seq: Sequence, text: str) -> str:
    """Answer text as shown (after a thinking section, without its leading newlines)."""
    return seq.reasoning.answer_text(text) if seq.reasoning is not None else text


def section_text(track: ReasoningTrack, token: int, part: str) -> str:
    """The thoughts' newly safe text after a token of the section: a thought's, or at the
    end tag what the detokenizer still held."""
    if part == THOUGHT:
        return track.thoughts.feed(track.detokenizer.push([token]))
    return track.thoughts.feed(track.detokenizer.flush()) if part == END else ""


def drain_thoughts(seq: Sequence) -> str:
    """The thoughts' text still held back by the detokenizer, as generation ends mid-thought
    (the trailing newlines are dropped, as at the end tag)."""
    track = seq.reasoning
    if track is None or not track.thinking:
        return ""
    return track.thoughts.feed(track.detokenizer.flush())


def speculation_counts(seq: Sequence) -> SpeculationCounts | None:
    """The drafts verified for `seq` so far (None when it never had one)."""
    if not seq.drafts_proposed:
        return None
    accepted = sum(seq.drafts_accepted)
    return SpeculationCounts(num_accepted=accepted, num_rejected=sum(seq.drafts_proposed) - accepted,
                             proposed_by_position=tuple(seq.drafts_proposed),
                             accepted_by_position=tuple(seq.drafts_accepted))


def sampled_logits(scheduled: SchedulerOutput, step: StepOutput) -> dict[str, float]:
    """The raw logit of each sampled token whose request asked for it, by request id."""
    return {item.seq.request_id: float(step.logprobs.logit[index]) for index, item in enumerate(scheduled.scheduled)
            if item.needs_sample and item.seq.sampling.output_logits}


def with_logit(output: RequestOutput, logit: float | None) -> RequestOutput:
    """`output` with its new token's logit (a request that asked; none for an output
    without a token, such as a grammar's abort)."""
    if logit is not None:
        output.logits = [logit] if output.new_token_ids else []
    return output


def token_logprob(num_top: int | None, step: StepOutput, index: int) -> TokenLogprob | None:
    """Row `index`'s sampled token with its log probabilities and `num_top` alternatives
    (None when the request asked for no logprobs)."""
    if num_top is None:
        return None
    lp = step.logprobs
    top = tuple((int(t), float(v)) for t, v in zip(lp.top_ids[index][:num_top], lp.top_logprobs[index][:num_top]))
    return TokenLogprob(token_id=int(step.tokens[index]), logprob=float(lp.logprob[index]),
                        sampling_logprob=float(lp.sampling_logprob[index]), rank=int(lp.rank[index]), top=top,
                        routing=routing_of(lp.routing, index))


def routing_of(routing, index: int) -> tuple[int, ...] | None:
    """Entry `index`'s experts, layer by layer, from [entries, layers, k] (None: a model
    without experts)."""
    return None if routing is None else tuple(int(expert) for expert in routing[index].reshape(-1))


def record_prompt_logprobs(seq: Sequence, start: int, arrays: PromptLogprobs) -> None:
    """Keep a chunk's prompt logprobs by position (a recomputed chunk overwrites its own)."""
    if seq.num_output_tokens:  # recomputed after a preemption: already reported
        return
    num_top = seq.sampling.prompt_logprobs
    for offset in range(len(arrays.logprob)):
        position = start + offset + 1  # of the token whose probability this is
        if position >= seq.num_prompt_tokens:
            break
        top = tuple((int(t), float(v)) for t, v in zip(arrays.top_ids[offset][:num_top],
                                                       arrays.top_logprobs[offset][:num_top]))
        seq.prompt_logprobs[position] = PromptTokenLogprob(
            token_id=seq.token_ids[position], logprob=float(arrays.logprob[offset]),
            rank=int(arrays.rank[offset]), is_greedy=bool(arrays.is_greedy[offset]), top=top,
            routing=routing_of(arrays.routing, offset))


def take_prompt_logprobs(seq: Sequence) -> list[PromptTokenLogprob] | None:
    """The prompt logprobs recorded so far, in prompt order, once: they go with the first output."""
    entries, seq.prompt_logprobs = seq.prompt_logprobs, {}
    return [entries[position] for position in sorted(entries)] if entries else None
