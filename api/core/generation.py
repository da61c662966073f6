"""Running the engine requests of one HTTP request and merging their outputs.

An HTTP request asks for several prompts x n choices; each choice is one engine request.
They run concurrently on the AsyncEngine, and `Generation.events()` merges their outputs
into per-choice `ChoiceEvent`s (text as the engine's output stage cut it at stop strings,
token ids, logprobs, finish reason, token counts). Closing the event iterator early (a
client that went away) cancels every choice's task, and each cancelled
`AsyncEngine.generate` aborts its request, freeing its KV pages before the engine's next
step. `collect` is the non-streaming reader. The choices' admission (api/core/admission.py)
is released as each choice ends. At shutdown, generations still open when the timeout runs
out are broken off (`ServerState.cut_off_generations`): their events raise a 503, which a
stream tells as its dialect's error event, and their engine requests are aborted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from api.core.admission import RETRY_AFTER_ASLEEP, release
from api.core.errors import ApiError, engine_failed, generation_cut_off
from api.core.state import ServerState
from api.core.tenancy import Tenancy
from api.core.usage import ChoiceTiming, Timing, Usage
from engine.async_engine import EngineDeadError, RequestAbortedError, RequestFailedError
from engine.host.request import (
    BeamSearchParams,
    EmbeddingReplacement,
    Grammar,
    PromptTokenLogprob,
    Request,
    RequestOutput,
    SamplingParams,
    SpeculationCounts,
    StopCriteria,
    TokenLogprob,
)
from engine.loader.lora import LoraAdapter
from engine.residency import EngineAsleepError
from engine.text.reasoning import Reasoning

log = logging.getLogger("flint")

_CHOICE_DONE = object()  # a choice's task has ended
_QUEUE_TIMEOUT = object()  # the request waited longer than its timeout for a first output


@dataclass(frozen=True)
class ChoiceRequest:
    """One choice to generate: choice `index` of the prompt at `prompt_index`."""

    index: int
    prompt_index: int
    prompt_token_ids: list[int]
    sampling: SamplingParams
    stop: StopCriteria
    grammar: Grammar | None = None  # what the output must follow (api/core/structured.py)
    prediction: tuple[int, ...] = ()  # the predicted output's tokens (api/core/prediction.py)
    embeddings: tuple[EmbeddingReplacement, ...] = ()  # input embeddings replacing prompt tokens
    routing_replay: tuple[tuple[int, ...] | None, ...] = ()  # experts by prompt position (engine/host/routing_replay.py)
    reasoning: Reasoning | None = None  # the model's thinking section (api/core/reasoning_prompt.py)
    beam: BeamSearchParams | None = None  # a beam search, whose beams are choices index, index + 1, ...


@dataclass
class ChoiceEvent:
    """One step's news for one choice; `text` is safe to show (stop strings removed)."""

    index: int
    prompt_index: int
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None
    finish_reason: str | None  # "stop", "length", "error", or None while running
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    seed: int
    prompt_logprobs: list[PromptTokenLogprob] | None = None  # with a choice's first event
    stop_string: str | None = None  # the stop string that ended the choice (Anthropic reports it)
    speculation: SpeculationCounts | None = None  # draft tokens verified so far
    logits: list[float] | None = None  # each token's raw model logit, when asked
    reasoning_text: str = ""  # the thinking's new text, apart from `text`
    num_reasoning_tokens: int = 0  # output tokens of the thinking section so far


class Generation:
    """The admitted choices of one HTTP request on the server's engine."""

    def __init__(self, server: ServerState, choices: list[ChoiceRequest], *,
                 request_id: str | None = None, timeout: float | None = None,
                 adapter: LoraAdapter | None = None, tenancy: Tenancy = Tenancy()) -> None:
        self.server = server
        self.choices = choices
        self.tenancy = tenancy  # its tier, prefix-cache isolation and session (api/core/tenancy.py)
        self.adapter = adapter  # the LoRA adapter `model` named; None: the base model
        self.request_id = request_id or uuid.uuid4().hex
        self.timeout = timeout  # seconds the request may wait for its first output
        self.usage = Usage()
        self.timing = Timing()
        self._unreleased = len(choices)
        self._queue: asyncio.Queue | None = None  # while the events are read
        self._broken_off: ApiError | None = None  # what the events raise next (`break_off`)

    @property
    def model_id(self) -> str:
        """The model the answer names: the adapter's name, or the served model's id."""
        return self.adapter.name if self.adapter is not None else self.server.model.id

    def release(self) -> None:
        """Give back the admission of the choices that have not ended (idempotent)."""
        release(self.server, self._unreleased, self.tenancy.priority)
        self._unreleased = 0

    def break_off(self, error: ApiError) -> None:
        """Make the events raise `error` next, before any event still queued, which ends every
        choice (see ServerState.cut_off_generations)."""
        self._broken_off = error
        if self._queue is not None:
            self._queue.put_nowait(error)  # wakes the reader

    async def events(self) -> AsyncIterator[ChoiceEvent]:
        """Every choice's events as they come; the iterator ends when all choices finished."""
        queue: asyncio.Queue = asyncio.Queue()
        self._queue = queue
        self.server.open_generations.add(self)
        if self.server.generations_cut_off:
            self.break_off(generation_cut_off())
        tasks = [asyncio.create_task(self._run_choice(choice, queue)) for choice in self.choices]
        timer = self._start_timer(queue)
        running = len(tasks)
        try:
            while running:
                item = await queue.get()
                if self._broken_off is not None:
                    raise self._broken_off
                if item is _CHOICE_DONE:
                    running -= 1
                    continue
                if item is _QUEUE_TIMEOUT:
                    if timer is None:  # fired just as the first output came: served in time
                        continue
                    raise ApiError(429, f"the request waited more than its timeout of {self.timeout} s "
                                        "to be served", param="timeout", error_type="requests", code="timeout")
                if isinstance(item, BaseException):
                    raise item
                if timer is not None:
                    timer.cancel()
                    timer = None
                self._observe(item)
                yield item
        finally:
            self.server.open_generations.discard(self)
            self._queue = None
            if timer is not None:
                timer.cancel()
            self.timing.finished = time.monotonic()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.release()

    def _start_timer(self, queue: asyncio.Queue) -> asyncio.TimerHandle | None:
        if self.timeout is None:
            return None
        return asyncio.get_running_loop().call_later(self.timeout, queue.put_nowait, _QUEUE_TIMEOUT)

    def _observe(self, event: ChoiceEvent) -> None:
        self.usage.observe(event)
        if self.timing.first_token is None:  # the first output (a prefill-only one has no token)
            self.timing.first_token = time.monotonic()

    def engine_request(self, choice: ChoiceRequest) -> Request:
        return Request(f"{self.request_id}-{choice.index}", choice.prompt_token_ids, choice.sampling, choice.stop,
                       choice.grammar, prediction=choice.prediction, embeddings=choice.embeddings,
                       routing_replay=choice.routing_replay, reasoning=choice.reasoning, beam=choice.beam,
                       adapter=self.adapter, priority=self.tenancy.priority,
                       cache_isolation=self.tenancy.cache_isolation, session=self.tenancy.session)

    async def _run_choice(self, choice: ChoiceRequest, queue: asyncio.Queue) -> None:
        """Feed one choice's events into `queue`; leaving early aborts the engine request."""
        timing = ChoiceTiming()
        try:
            async with aclosing(self.server.running_engine.generate(self.engine_request(choice))) as outputs:
                async for output in outputs:
                    timing.observe(output)
                    for event in choice_events(choice, output):
                        queue.put_nowait(event)
        except EngineDeadError as error:
            log.error("generation failed: %s", error)
            queue.put_nowait(broken_off(choice, timing.last) if timing.last is not None else engine_failed())
        except EngineAsleepError:
            queue.put_nowait(ApiError(503, "The server is asleep (POST /wake_up wakes it). Retry later.",
                                      error_type="service_unavailable", code="sleeping",
                                      headers={"Retry-After": str(RETRY_AFTER_ASLEEP)}))
        except RequestAbortedError as error:  # the server changed its weights or went to sleep
            queue.put_nowait(ApiError(503, f"{error}; send it again.", error_type="service_unavailable",
                                      code="aborted", headers={"Retry-After": str(RETRY_AFTER_ASLEEP)}))
        except ValueError as error:  # the engine refused the request (its own checks)
            queue.put_nowait(ApiError(400, str(error), param="prompt"))
        except RequestFailedError:  # this request alone (the engine logged why); the engine serves on
            queue.put_nowait(ApiError(500, "The server had an internal error while generating this request; "
                                           "other requests are not affected.", error_type="server_error"))
        except Exception as error:
            log.error("a choice failed unexpectedly", exc_info=error)
            queue.put_nowait(ApiError(500, "The server had an internal error while generating.",
                                      error_type="server_error"))
        finally:
            self._finish_choice(choice, timing)
            queue.put_nowait(_CHOICE_DONE)

    def _release_one(self) -> None:
        if self._unreleased:
            self._unreleased -= 1
            release(self.server, 1, self.tenancy.priority)

    def _finish_choice(self, choice: ChoiceRequest, timing: ChoiceTiming) -> None:
        """Count the choice out of admission and into the metrics."""
        self._release_one()
        last = timing.last
        self.server.metrics.record_request(
            prompt_tokens=last.num_prompt_tokens if last else len(choice.prompt_token_ids),
            generation_tokens=last.num_output_tokens if last else 0,
            time_to_first_token=timing.time_to_first_token(self.timing.started),
            time_per_output_token=timing.time_per_output_token(),
            e2e_latency=time.monotonic() - self.timing.started,
            tier=self.tenancy.tier,
        )


def choice_events(choice: ChoiceRequest, output: RequestOutput) -> list[ChoiceEvent]:
    """The events of one engine output: one, or for a finished beam search one per beam,
    best first, as choices choice.index + i."""
    if output.beams is None:
        return [choice_event(choice, output)]
    return [choice_event(dataclasses.replace(choice, index=choice.index + rank), dataclasses.replace(
        output, new_token_ids=beam.token_ids, text=beam.text, finish_reason=beam.finish_reason,
        num_output_tokens=len(beam.token_ids), beams=None)) for rank, beam in enumerate(output.beams)]


def choice_event(choice: ChoiceRequest, output: RequestOutput) -> ChoiceEvent:
    finish = "error" if output.finish_reason == "abort" else output.finish_reason  # aborted by the server
    return ChoiceEvent(
        index=choice.index, prompt_index=choice.prompt_index, text=output.text,
        token_ids=list(output.new_token_ids), logprobs=output.logprobs, finish_reason=finish,
        num_prompt_tokens=output.num_prompt_tokens, num_cached_tokens=output.num_cached_tokens,
        num_output_tokens=output.num_output_tokens, seed=output.seed, prompt_logprobs=output.prompt_logprobs,
        stop_string=output.stop_reason if isinstance(output.stop_reason, str) else None,
        speculation=output.speculation, logits=output.logits, reasoning_text=output.reasoning_text,
        num_reasoning_tokens=output.num_reasoning_tokens,
    )


def broken_off(choice: ChoiceRequest, last: RequestOutput) -> ChoiceEvent:
    """The closing event of a choice whose generation broke off mid-way."""
    return ChoiceEvent(
        index=choice.index, prompt_index=choice.prompt_index, text="", token_ids=[], logprobs=None,
        finish_reason="error", num_prompt_tokens=last.num_prompt_tokens,
        num_cached_tokens=last.num_cached_tokens, num_output_tokens=last.num_output_tokens, seed=last.seed,
    )


@dataclass
class ChoiceResult:
    """A finished choice, for non-streamed responses."""

    index: int
    prompt_index: int
    text: str = ""
    reasoning_text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[PromptTokenLogprob] | None = None
    finish_reason: str | None = None
    seed: int = 0
    stop_string: str | None = None
    logits: list[float] = field(default_factory=list)
    num_reasoning_tokens: int = 0  # the first of token_ids: the thinking section's

    def add(self, event: ChoiceEvent) -> None:
        self.text += event.text
        self.reasoning_text += event.reasoning_text
        self.token_ids += event.token_ids
        self.logprobs += event.logprobs or []
        self.logits += event.logits or []
        self.prompt_logprobs = self.prompt_logprobs or event.prompt_logprobs
        self.finish_reason = event.finish_reason or self.finish_reason
        self.seed = event.seed
        self.stop_string = event.stop_string or self.stop_string
        self.num_reasoning_tokens = max(self.num_reasoning_tokens, event.num_reasoning_tokens)


class Results:
    """Choice results filled from events as they pass (a stream that is also stored whole).
    A beam search's choices beyond its first appear with their events."""

    def __init__(self, choices: list[ChoiceRequest]) -> None:
        self.by_index = {choice.index: ChoiceResult(choice.index, choice.prompt_index) for choice in choices}

    def add(self, event: ChoiceEvent) -> None:
        self.by_index.setdefault(event.index, ChoiceResult(event.index, event.prompt_index)).add(event)

    def ordered(self) -> list[ChoiceResult]:
        return [self.by_index[index] for index in sorted(self.by_index)]


async def collect(generation: Generation) -> list[ChoiceResult]:
    """Run every choice to the end; the results in choice order."""
    results = Results(generation.choices)
    async with aclosing(generation.events()) as events:
        async for event in events:
            results.add(event)
    return results.ordered()
