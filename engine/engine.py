"""Engine: add_request / step / abort over the scheduler, the model runner and the output stage.

Each step: the scheduler picks chunks, the runner computes them and samples, and the output
stage (engine/host/output.py) appends the sampled tokens, checks stop conditions, finishes the
sequences that stopped and returns RequestOutputs. AsyncEngine (engine/async_engine.py)
drives it from a background thread for the HTTP server.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Callable
from dataclasses import dataclass

from engine.config import EngineConfig, usable_cores
from engine.device import native
from engine.device.lora import check_fits
from engine.device.runner import InFlight, ModelRunner, RowPlan
from engine.device.sharding import make_mesh
from engine.host import beam_step
from engine.host.adapters import AdapterSlots
from engine.host.beam_search import BeamSearch
from engine.host.block_manager import BlockManager
from engine.host.decode_window import all_running, merge_outputs, reserve_window, window_headroom, window_round
from engine.host.faults import ERROR, failed_output
from engine.host.grammar_masks import GrammarMasks
from engine.host.output import OutputStage, speculation_counts
from engine.host.request import SEED_MODULUS, Request, RequestOutput
from engine.host.scheduled import SchedulerOutput
from engine.host.scheduler import Scheduler
from engine.host.sequence import Sequence
from engine.host.speculation import SpeculationConfig, follows_prediction
from engine.host.validation import check_request
from engine.host.window_output import land_window, lands_by_row
from engine.loader.checkpoint import Checkpoint
from engine.loader.served_cache import keep_packed
from engine.loader.serving import load_for_serving, served_config
from engine.loader.source import ModelSource, resolve_model
from engine.loader.progress import Progress
from engine.residency import EngineResidency
from engine.rows import row_plan
from engine.text.grammar import GrammarCompiler, accepts_prefix
from engine.text.reasoning import answer_tokens
from engine.text.tokenizer import Tokenizer
from engine.verification import Verification, draft_rows, plan_drafts, record, rounds


@dataclass(frozen=True)
class Flight:
    """Steps on the device: what was scheduled, and the runner's handle to collect them."""

    scheduled: SchedulerOutput
    num_steps: int
    device: InFlight  # the runner's handle
    verifications: tuple[Verification, ...] = ()  # drafts checked by extra rows (engine/verification.py)
    # A decode window's place in its chain: the rounds run before it since `scheduled` was
    # made, and the most its rows may run in all (decode_window.window_headroom).
    offset: int = 0
    headroom: int = 0
    by_row: bool = False  # its rows' results land a row at a time (window_output.lands_by_row)


@dataclass(frozen=True)
class EngineStats:
    """The engine's load at one moment (for /metrics and admission control)."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float  # fraction of the allocatable KV pages held, 0 to 1
    # The same held pages as a count (what a leak check compares with 0), and the pages
    # holding a prefix-cache entry, held or evictable: those are free to take, not leaked.
    num_pages_in_use: int = 0
    num_cached_pages: int = 0
    # Service tiers (engine/host/tenancy.py): the priority tier's share of the counts above.
    num_priority_running: int = 0
    num_priority_waiting: int = 0
    # The prefix cache's lookups since start, in tokens (of which found: hits), and those of
    # sequences in a session; live sessions, and the free pages kept for them (engine/host/sessions.py).
    num_prefix_queried_tokens: int = 0
    num_prefix_hit_tokens: int = 0
    num_session_queried_tokens: int = 0
    num_session_hit_tokens: int = 0
    num_live_sessions: int = 0
    num_session_pages: int = 0
    # LoRA (engine/host/adapters.py): the adapters of running and of waiting sequences, by
    # name; the device's slots, and how often one was written (and, of those, over another).
    running_adapters: tuple[str, ...] = ()
    waiting_adapters: tuple[str, ...] = ()
    max_loras: int = 0
    num_adapter_loads: int = 0
    num_adapter_evictions: int = 0
    weights_version: int = 0  # engine/residency.py
    sleep_level: int = 0


class Engine:
    """A model, its KV cache and the queue of requests being generated."""

    def __init__(self, checkpoint: Checkpoint, tokenizer: Tokenizer, config: EngineConfig, mesh=None,
                 served: dict | None = None):
        """`served`: the checkpoint's weights in their served form, made already (its
        `params` are then not read)."""
        config = self.config = served_config(config, checkpoint.source)
        self.model_config = checkpoint.config
        self.weight_formats = checkpoint.formats  # a GGUF file's projections as read (engine/loader/gguf_blocks.py)
        self.tokenizer = tokenizer
        self.runner = ModelRunner(checkpoint.config, config, checkpoint.params, mesh, served)
        self.block_manager = BlockManager(config.num_pages, config.page_size, config.enable_prefix_caching,
                                          window=checkpoint.config.shared_window(config.max_model_len),
                                          session_ttl=config.session_ttl)
        self.adapters = AdapterSlots(config.max_loras)  # LoRA slots on the device (engine/host/adapters.py)
        self.scheduler = Scheduler(config, self.block_manager, self.adapters)
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids or checkpoint.config.eos_token_ids)
        self.output = OutputStage(tokenizer, self.scheduler, self.eos_token_ids, config.max_model_len,
                                  on_fault=self._fail)
        self.grammars = GrammarCompiler(tokenizer, checkpoint.config.vocab_size, self.eos_token_ids)
        self.masks = GrammarMasks(checkpoint.config.vocab_size)
        self._sequences: dict[str, Sequence] = {}  # unfinished sequences by request id
        self._beam_searches: dict[str, BeamSearch] = {}  # unfinished beam searches by request id
        self._seeds = random.Random(config.seed)
        self._in_flight: Flight | None = None  # a window dispatched behind the last one (step)
        self._failures: list[RequestOutput] = []  # requests failed on their own this step (engine/host/faults.py)
        self.speculation = SpeculationConfig(ngram=config.speculative == "ngram",
                                             num_tokens=config.num_speculative_tokens)
        # New weights, sleep and wake, between requests (engine/residency.py).
        self.residency = EngineResidency(self, None if checkpoint.source.path is None else str(checkpoint.source.path))

    @classmethod
    def from_model(cls, model: str | ModelSource | None = None, config: EngineConfig | None = None,
                   report: Callable[[str], None] | None = None, compile_all: bool = True,
                   kept_in: str | os.PathLike | None = None, progress: Progress | None = None) -> Engine:
        """Load a checkpoint (the embedded model when None), build the engine, compile every
        bucket (or, with `compile_all` False, the essential ones: `compile_remaining` then
        does the rest, while the engine already serves). `kept_in`: a directory where the
        served weights are kept between starts (engine/loader/served_cache.py). `report` is
        told what happens as log messages; `progress`, the weights read and the buckets
        compiled as counts (engine/loader/progress.py)."""
        config = config or EngineConfig()
        mesh = make_mesh(config)
        source = model if isinstance(model, ModelSource) else resolve_model(model, kept_in=kept_in)
        checkpoint, tokenizer, served = load_for_serving(source, served_config(config, source), mesh, kept_in, report,
                                                         progress)
        engine = cls(checkpoint, tokenizer, config, mesh, served)
        checkpoint.params = served = None  # the runner holds the served weights; let the loaded ones go
        if checkpoint.kept_at is not None and engine.runner.decoder.native_linear:  # kept again, packed
            keep_packed(checkpoint.kept_at, engine.runner.state, checkpoint.formats)
        if report:
            report(engine.describe())
        # Before the engine serves, so every core it may use compiles: XLA's compiles of two
        # buckets (or their loads from the compilation cache) overlap.
        engine.runner.warmup(report, None if compile_all else engine.runner.essential_buckets(), progress,
                             threads=usable_cores())
        return engine

    def describe(self) -> str:
        """Where and how the model runs, for the start-up log."""
        mesh, config = self.runner.mesh, self.config
        kernels = f"; {native.kernel_paths()}" if self.runner.decoder.native_linear else ""
        return (f"{mesh.size} {mesh.devices.flat[0].platform} device(s), tensor parallel over {mesh.size}; "
                f"dtype {config.dtype}, quantization {config.quantization}, KV cache {self.runner.kv_cache_dtype}, "
                f"attention {self.runner.attention}" + kernels)

    def compile_remaining(self, report: Callable[[str], None] | None = None) -> float:
        """Compile the buckets `from_model(compile_all=False)` left (safe beside `step`, from
        another thread: a step uses a bucket once it is compiled); returns the seconds it took."""
        return self.runner.warmup(report, self.runner.remaining_buckets())

    def add_request(self, request: Request) -> None:
        """Queue a request. Raises ValueError when it can never be served; any other error
        (its grammar's matcher, its detokenizer) leaves nothing of it behind either."""
        self.residency.require_awake()
        self.validate(request)
        if request.request_id in self._sequences:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        try:
            self._add(request)
        except BaseException:
            self._sequences.pop(request.request_id, None)
            self._beam_searches.pop(request.request_id, None)
            raise

    def _add(self, request: Request) -> None:
        seed = request.sampling.seed if request.sampling.seed is not None else self._seeds.randrange(SEED_MODULUS)
        matcher = self.grammars.matcher(request.grammar) if request.grammar is not None else None
        forced = list(request.sampling.forced_output_tokens)
        if matcher is not None and forced and not accepts_prefix(matcher, answer_tokens(request.reasoning, forced)):
            raise ValueError("the forced output tokens do not follow the request's grammar")
        seq = self.output.new_sequence(request, seed, matcher)
        self._sequences[request.request_id] = seq
        if request.beam is not None:
            eos = frozenset() if request.stop.ignore_eos else self.eos_token_ids
            self._beam_searches[request.request_id] = BeamSearch(seq, request.beam, eos, self.config.max_model_len)
        self.scheduler.add(seq)

    def validate(self, request: Request) -> None:
        """Raise ValueError for a request this engine can never serve (safe from any thread)."""
        check_request(request, self.config.max_model_len, self.model_config, self.grammars)
        if request.adapter is not None:
            if not self.config.max_loras:
                raise ValueError("this engine has no LoRA adapter slots (max_loras 0)")
            check_fits(request.adapter, self.model_config, self.config)

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request now, freeing its KV pages; None if it is unknown or already done."""
        seq = self._finish_request(request_id, "abort")
        return self.output.aborted(seq) if seq is not None else None

    def _fail(self, seq: Sequence, error: BaseException) -> None:
        """End `seq`'s request, which failed on its own (engine/host/faults.py); its output goes
        out with this step's."""
        if self._finish_request(seq.request_id, ERROR) is not None:
            self._failures.append(failed_output(seq, error))
        while self.scheduler.abort(seq.request_id) is not None:  # a beam forked before the fault
            pass

    def _finish_request(self, request_id: str, reason: str) -> Sequence | None:
        """Finish every sequence of the request (its beams too); its root sequence, or None."""
        seq = self._sequences.pop(request_id, None)
        if seq is None:
            return None
        search = self._beam_searches.pop(request_id, None)
        for beam in search.sequences if search is not None else [seq]:
            self.scheduler.finish(beam, reason)
        return seq

    def unfinished_request_ids(self) -> list[str]:
        return list(self._sequences)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished

    def stats(self) -> EngineStats:
        """Current counts. Safe enough to call from another thread while the engine steps:
        each figure is the length of a list, deque or dict (atomic under the GIL), so a
        reading may straddle a step, off by a request or page for one scrape, but never raises."""
        blocks, scheduler = self.block_manager, self.scheduler
        return EngineStats(num_running=scheduler.num_running, num_waiting=scheduler.num_waiting,
                           kv_cache_usage=blocks.usage, num_pages_in_use=blocks.num_pages - 1 - blocks.num_free_pages,
                           num_cached_pages=blocks.num_cached_pages,
                           num_priority_running=scheduler.num_priority_running,
                           num_priority_waiting=scheduler.num_priority_waiting,
                           num_prefix_queried_tokens=blocks.num_queried_tokens, num_prefix_hit_tokens=blocks.num_hit_tokens,
                           num_session_queried_tokens=blocks.num_session_queried_tokens,
                           num_session_hit_tokens=blocks.num_session_hit_tokens,
                           num_live_sessions=blocks.sessions.num_live, num_session_pages=len(blocks.sessions),
                           running_adapters=adapter_names(list(scheduler.running)),
                           waiting_adapters=adapter_names(list(scheduler.waiting)), max_loras=self.config.max_loras,
                           num_adapter_loads=self.adapters.num_loads, num_adapter_evictions=self.adapters.num_evictions,
                           weights_version=self.residency.version, sleep_level=self.residency.sleep_level)

    def step(self) -> list[RequestOutput]:
        """Run one batch (a window of decode steps when every row decodes, see
        engine/host/decode_window.py); returns an output for every request that gained tokens or
        finished.

        With `overlap_steps`, a window of decodes is followed at once by the next one,
        dispatched before the first one's results are back and fed on the device by its
        sampled tokens, so that the device computes while the host lands the results."""
        flight = self._in_flight or self._dispatch_scheduled()
        if flight is None:
            return self._take_failures()
        self._in_flight = self._chain(flight) if self.config.overlap_steps else None
        outputs = self._land(flight)
        self.masks.start(self.scheduler.running)  # the grammars' next masks, while the host goes on
        return outputs + self._take_failures()

    def _take_failures(self) -> list[RequestOutput]:
        failures, self._failures = self._failures, []
        return failures

    def _dispatch_scheduled(self) -> Flight | None:
        scheduled = self.scheduler.schedule()
        if scheduled.is_empty:
            return None
        for slot, adapter in self.adapters.take_writes():  # slots the scheduler gave new adapters
            self.runner.load_adapter(slot, adapter)
        verifications = plan_drafts(scheduled, self.speculation, self.config, self.block_manager)
        if verifications:
            plans = self.plan(scheduled)
            rows = plans + draft_rows(verifications, plans)
            return Flight(scheduled, 1, self.runner.dispatch(rows), tuple(verifications))
        headroom = window_headroom(scheduled, self.config.max_model_len)
        num_steps = max(min(headroom, self.config.max_decode_steps), 1)
        if num_steps > 1 and not reserve_window(self.block_manager, scheduled, num_steps):
            num_steps = 1
        return Flight(scheduled, num_steps, self.runner.dispatch(self.plan(scheduled), num_steps), headroom=headroom,
                      by_row=headroom > 1 and lands_by_row(scheduled))

    def _chain(self, flight: Flight) -> Flight | None:
        """The window after `flight`, dispatched now; None when its rows cannot go on alone:
        a request is waiting to be admitted, a row's mask or limits need the host, or the
        pages for it are not free (only the scheduler preempts)."""
        if self.scheduler.num_waiting or flight.verifications or self._drafts_possible(flight.scheduled):
            return None
        scheduled, offset = flight.scheduled, flight.offset + flight.num_steps
        num_steps = min(self.config.max_decode_steps, flight.headroom - offset)
        # Pages from where the host stands: `flight`'s rounds are not landed yet.
        if num_steps < 1 or not all_running(scheduled) or not reserve_window(
                self.block_manager, scheduled, flight.num_steps + num_steps):
            return None
        tables = [item.seq.block_table for item in scheduled.scheduled]
        return Flight(scheduled, num_steps, self.runner.dispatch_next(flight.device, tables, num_steps),
                      offset=offset, headroom=flight.headroom, by_row=flight.by_row)

    def _drafts_possible(self, scheduled: SchedulerOutput) -> bool:
        """Whether a row might have a draft after this window: then the host must see its
        tokens before the next step (n-gram lookup, or a prediction not yet used up)."""
        return any(self.speculation.ngram or follows_prediction(item.seq) for item in scheduled.scheduled)

    def _land(self, flight: Flight) -> list[RequestOutput]:
        """Collect `flight` and pass each of its steps through the output stage. Rows that
        finished while it ran (a stop in the window before, an abort) are skipped by the
        scheduler's update, and their tokens are dropped with the slots they were written to."""
        steps = self.runner.collect(flight.device)
        if flight.verifications:
            outputs = self._land_verified(flight, steps[0])
        elif flight.num_steps == 1:
            outputs = self.output.process(flight.scheduled, steps[0])
        elif flight.by_row:  # a row's tokens at once (engine/host/window_output.py)
            outputs = land_window(self.output, flight.scheduled, steps)
        else:
            outputs = merge_outputs([output for index, step in enumerate(steps)
                                     for output in self.output.process(window_round(flight.scheduled, flight.offset + index), step)])
        if flight.num_steps == 1 and steps[0].beams is not None:
            outputs += self._advance_beams(flight.scheduled, steps[0])
        for output in outputs:
            if output.finished:
                self._sequences.pop(output.request_id, None)
        return outputs

    def _land_verified(self, flight: Flight, step) -> list[RequestOutput]:
        """A step that checked drafts: its rounds through the output stage, in order, then
        each output with its request's draft tally."""
        outputs = merge_outputs([output for scheduled, round_ in rounds(flight.scheduled, step, flight.verifications)
                                 for output in self.output.process(scheduled, round_)])
        record(flight.verifications)
        verified = {verification.seq.request_id: verification.seq for verification in flight.verifications}
        return [dataclasses.replace(output, speculation=speculation_counts(verified[output.request_id]))
                if output.request_id in verified else output for output in outputs]

    def _advance_beams(self, scheduled: SchedulerOutput, step) -> list[RequestOutput]:
        """Beam rows' candidates to their searches (engine/host/beam_step.py): the page copies of
        the next beams go to the device now, ahead of the next step, and every search that
        ended answers with its one output."""
        copies, ended = beam_step.land(scheduled, step.beams, self.scheduler, self._fail)
        self.runner.copy_pages(copies)
        outputs = []
        for search in ended:
            self._beam_searches.pop(search.request_id, None)
            try:
                outputs.append(beam_step.final_output(search, self.tokenizer))
            except Exception as error:
                self._fail(search.root, error)
        return outputs

    def plan(self, scheduled: SchedulerOutput) -> list[RowPlan]:
        """The runner's rows for a step (engine/rows.py); a row whose own inputs fail fails its request."""
        return [row_plan(item, self.masks, self._fail) for item in scheduled.scheduled]

    def generate(self, requests: list[Request]) -> dict[str, list[int]]:
        """Run requests to completion; returns each one's generated token ids (for tests and tools)."""
        for request in requests:
            self.add_request(request)
        generated: dict[str, list[int]] = {request.request_id: [] for request in requests}
        while self.has_unfinished():
            for output in self.step():
                generated[output.request_id].extend(output.new_token_ids)
        return generated


def adapter_names(seqs: list[Sequence]) -> tuple[str, ...]:
    """The LoRA adapters `seqs` run with, by name, sorted (the base counts as none)."""
    return tuple(sorted({seq.adapter.name for seq in seqs if seq.adapter is not None}))
