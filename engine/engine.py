"""Engine: add_request / step / abort over the scheduler and the model runner.

Each step: the scheduler picks chunks, the runner computes them and samples, and the engine
turns sampled tokens into RequestOutputs (token ids, a UTF-8-safe text delta, and a finish
reason once a stop condition holds). AsyncEngine (engine/async_engine.py) drives it from a
background thread for the HTTP server.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.loader.checkpoint import Checkpoint, load_checkpoint
from engine.request import SEED_MODULUS, PromptTokenLogprob, Request, RequestOutput, TokenLogprob
from engine.runner import ModelRunner, RowPlan, StepOutput
from engine.sampling.inputs import RowSampling
from engine.scheduler import Scheduler, SchedulerOutput
from engine.sequence import Sequence
from engine.sharding import make_mesh, param_shardings
from engine.tokenizer import IncrementalDetokenizer, Tokenizer


@dataclass(frozen=True)
class EngineStats:
    """The engine's load at one moment (for /metrics and admission control)."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float  # fraction of the allocatable KV pages held, 0 to 1


class Engine:
    """A model, its KV cache and the queue of requests being generated."""

    def __init__(self, checkpoint: Checkpoint, tokenizer: Tokenizer, config: EngineConfig, mesh=None):
        self.config = config
        self.model_config = checkpoint.config
        self.tokenizer = tokenizer
        self.runner = ModelRunner(checkpoint.config, config, checkpoint.params, mesh)
        self.block_manager = BlockManager(config.num_pages, config.page_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.block_manager)
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids or checkpoint.config.eos_token_ids)
        self._detokenizers: dict[str, IncrementalDetokenizer] = {}
        self._sequences: dict[str, Sequence] = {}
        self._seeds = random.Random(config.seed)
        self._mirostat_mu: dict[str, float] = {}  # each running request's Mirostat state
        self._prompt_logprobs: dict[str, dict[int, PromptTokenLogprob]] = {}  # by position, until first output

    @classmethod
    def from_model(cls, model: str | None = None, config: EngineConfig | None = None,
                   report: Callable[[str], None] | None = None) -> Engine:
        """Load a checkpoint (the embedded model when None), build the engine, compile every bucket."""
        config = config or EngineConfig()
        mesh = make_mesh(config)
        checkpoint = load_checkpoint(model, shardings=lambda c, p: param_shardings(c, mesh, p))
        engine = cls(checkpoint, tokenizer_for(checkpoint), config, mesh)
        engine.runner.warmup(report)
        return engine

    def add_request(self, request: Request) -> None:
        """Queue a request. Raises ValueError when it can never be served."""
        self.validate(request)
        if request.request_id in self._sequences:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        seed = request.sampling.seed if request.sampling.seed is not None else self._seeds.randrange(SEED_MODULUS)
        seq = Sequence.from_request(request, seed)
        self._sequences[request.request_id] = seq
        self._detokenizers[request.request_id] = IncrementalDetokenizer(
            self.tokenizer, prompt_ids=request.prompt_token_ids, skip_special_tokens=True)
        self.scheduler.add(seq)

    def validate(self, request: Request) -> None:
        prompt = request.prompt_token_ids
        if not prompt:
            raise ValueError("the prompt is empty")
        if len(prompt) >= self.config.max_model_len:
            raise ValueError(f"the prompt has {len(prompt)} tokens; this engine's limit is "
                             f"{self.config.max_model_len - 1} (max_model_len {self.config.max_model_len})")
        vocab = self.model_config.vocab_size
        if any(not 0 <= token < vocab for token in prompt):
            raise ValueError(f"prompt token ids must lie in [0, {vocab})")
        # max_tokens 0 is a prefill that only scores the prompt (lm-eval's loglikelihood).
        if request.sampling.max_tokens < (0 if request.sampling.prompt_logprobs is not None else 1):
            raise ValueError("max_tokens must be at least 1 (0 only with prompt logprobs)")

    def abort(self, request_id: str) -> RequestOutput | None:
        """Stop a request now, freeing its KV pages; None if it is unknown or already done."""
        seq = self.scheduler.abort(request_id)
        return self._finish_output(seq, []) if seq is not None else None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished

    def stats(self) -> EngineStats:
        """Current counts. Safe enough to call from another thread while the engine steps:
        each figure is the length of a list, deque or dict (atomic under the GIL), so a
        reading may straddle a step, off by a request or page for one scrape, but never raises."""
        return EngineStats(num_running=self.scheduler.num_running, num_waiting=self.scheduler.num_waiting,
                           kv_cache_usage=self.block_manager.usage)

    def step(self) -> list[RequestOutput]:
        """Run one batch; returns an output for every request that gained tokens or finished."""
        output = self.scheduler.schedule()
        if output.is_empty:
            return []
        step = self.runner.execute(self.plan(output))
        logprobs: dict[str, TokenLogprob] = {}
        sampled = []
        for index, item in enumerate(output.scheduled):
            if step.prompt_logprobs[index] is not None:
                self._record_prompt_logprobs(item.seq, item.start, step.prompt_logprobs[index])
            if item.needs_sample:
                sampled.append(int(step.tokens[index]))
                self._record_sample(item.seq, step, index, logprobs)
        grown = self.scheduler.update(output, sampled)
        outputs = [self._output_for(seq, logprobs.get(seq.request_id)) for seq in grown]
        return outputs + [self._finish_prefill_only(item.seq) for item in output.scheduled
                          if item.seq.is_prefill_only_done]

    def _finish_prefill_only(self, seq: Sequence) -> RequestOutput:
        """A max_tokens 0 request whose prompt is computed: done, with no output token."""
        self.scheduler.finish(seq, "length")
        return self._finish_output(seq, [])

    def _record_sample(self, seq: Sequence, step: StepOutput, index: int, logprobs: dict) -> None:
        """Keep the row's Mirostat state, and its logprobs when the request asked for them."""
        self._mirostat_mu[seq.request_id] = float(step.mirostat_mu[index])
        num_top = seq.sampling.logprobs
        if num_top is not None:
            lp = step.logprobs
            top = tuple((int(t), float(v)) for t, v in zip(lp.top_ids[index][:num_top], lp.top_logprobs[index][:num_top]))
            logprobs[seq.request_id] = TokenLogprob(
                token_id=int(step.tokens[index]), logprob=float(lp.logprob[index]),
                sampling_logprob=float(lp.sampling_logprob[index]), rank=int(lp.rank[index]), top=top)

    def plan(self, output: SchedulerOutput) -> list[RowPlan]:
        return [
            RowPlan(
                token_ids=item.seq.token_ids[item.start: item.start + item.num_new_tokens],
                start=item.start,
                block_table=item.seq.block_table,
                sampling=self._row_sampling(item.seq) if item.needs_sample else None,
                next_token_ids=self._next_prompt_ids(item.seq, item.start, item.num_new_tokens),
            )
            for item in output.scheduled
        ]

    @staticmethod
    def _next_prompt_ids(seq: Sequence, start: int, count: int) -> list[int] | None:
        """For prompt logprobs: each token's following prompt token (-1 past the prompt)."""
        if seq.sampling.prompt_logprobs is None or start >= seq.num_prompt_tokens - 1:
            return None
        follows = seq.token_ids[start + 1: min(start + count + 1, seq.num_prompt_tokens)]
        return follows + [-1] * (count - len(follows))

    def _record_prompt_logprobs(self, seq: Sequence, start: int, arrays) -> None:
        """Keep a chunk's prompt logprobs by position (a recomputed chunk overwrites its own)."""
        if seq.num_output_tokens:  # recomputed after a preemption: already reported
            return
        num_top = seq.sampling.prompt_logprobs
        entries = self._prompt_logprobs.setdefault(seq.request_id, {})
        for offset in range(len(arrays.logprob)):
            position = start + offset + 1  # of the token whose probability this is
            if position >= seq.num_prompt_tokens:
                break
            top = tuple((int(t), float(v)) for t, v in zip(arrays.top_ids[offset][:num_top],
                                                           arrays.top_logprobs[offset][:num_top]))
            entries[position] = PromptTokenLogprob(
                token_id=seq.token_ids[position], logprob=float(arrays.logprob[offset]),
                rank=int(arrays.rank[offset]), is_greedy=bool(arrays.is_greedy[offset]), top=top)

    def _row_sampling(self, seq: Sequence) -> RowSampling:
        return RowSampling(
            params=seq.sampling, seed=seq.seed, token_ids=seq.token_ids,
            num_prompt_tokens=seq.num_prompt_tokens, stop_token_ids=self._stop_token_ids(seq),
            mirostat_mu=self._mirostat_mu.get(seq.request_id, 2.0 * seq.sampling.mirostat_target),
        )

    def _output_for(self, seq: Sequence, logprob: TokenLogprob | None) -> RequestOutput:
        token = seq.token_ids[-1]
        reason = self._stop_reason(seq, token)
        ends_text = reason == "stop" and token in self._stop_token_ids(seq)
        text = "" if ends_text else self._detokenizers[seq.request_id].push([token])
        logprobs = [logprob] if logprob is not None else None
        if reason is None:
            return self._make_output(seq, [token], text, None, logprobs)
        self.scheduler.finish(seq, reason)
        return self._finish_output(seq, [token], text, logprobs)

    def _stop_token_ids(self, seq: Sequence) -> frozenset[int]:
        ids = frozenset(seq.sampling.stop_token_ids)
        return ids if seq.sampling.ignore_eos else ids | self.eos_token_ids

    def _stop_reason(self, seq: Sequence, token: int) -> str | None:
        if token in self._stop_token_ids(seq):
            return "stop"
        if seq.num_output_tokens >= seq.sampling.max_tokens or seq.num_tokens >= self.config.max_model_len:
            return "length"
        return None

    def _finish_output(self, seq: Sequence, tokens: list[int], text: str = "",
                       logprobs: list[TokenLogprob] | None = None) -> RequestOutput:
        text += self._detokenizers.pop(seq.request_id).flush()
        self._sequences.pop(seq.request_id, None)
        self._mirostat_mu.pop(seq.request_id, None)
        return self._make_output(seq, tokens, text, seq.finish_reason, logprobs)

    def _make_output(self, seq: Sequence, tokens: list[int], text: str, reason: str | None,
                     logprobs: list[TokenLogprob] | None = None) -> RequestOutput:
        prompt = self._prompt_logprobs.pop(seq.request_id, None)
        return RequestOutput(
            request_id=seq.request_id, new_token_ids=tokens, text=text, finish_reason=reason,
            num_prompt_tokens=seq.num_prompt_tokens, num_cached_tokens=seq.num_cached_tokens,
            num_output_tokens=seq.num_output_tokens, seed=seq.seed, logprobs=logprobs,
            prompt_logprobs=[prompt[p] for p in sorted(prompt)] if prompt is not None else None,
        )

    def generate(self, requests: list[Request]) -> dict[str, list[int]]:
        """Run requests to completion; returns each one's generated token ids (for tests and tools)."""
        for request in requests:
            self.add_request(request)
        generated: dict[str, list[int]] = {request.request_id: [] for request in requests}
        while self.has_unfinished():
            for output in self.step():
                generated[output.request_id].extend(output.new_token_ids)
        return generated


def tokenizer_for(checkpoint: Checkpoint) -> Tokenizer:
    """The checkpoint's own tokenizer, reusing the parsed GGUF metadata where there is one.

    Hugging Face directories and Orbax checkpoints written by tools/convert.py hold a
    tokenizer.json with its tokenizer_config.json."""
    if checkpoint.source.format == "gguf":
        return Tokenizer.from_gguf(checkpoint.gguf_fields if checkpoint.gguf_fields is not None
                                   else checkpoint.source.path)
    return Tokenizer.from_hf_directory(checkpoint.source.path)
