"""Logprobs of /v1/completions choices, in both formats the dialects use.

- Legacy (`logprobs: <int>`): parallel lists `tokens`, `token_logprobs`, `top_logprobs`
  (one {token: logprob} dict per position, the sampled token always in it, as OpenAI and
  Fireworks promise) and `text_offset`.
- Content (`logprobs: true`, OpenAI's newer format): one entry per token with its bytes,
  its top alternatives (`top_logprobs` of them), its text offset and, for a mixture of
  experts, its `routing_matrix` (api/completions/routing.py).

With echo the prompt's tokens come first. The first prompt token has no context, so its
logprob is null, as OpenAI and vLLM report it; the spec types these lists as floats, so
those entries are built with `model_construct`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from api.completions.routing import routing_matrix
from engine.config import ModelConfig
from engine.host.request import PromptTokenLogprob, TokenLogprob
from engine.text.tokenizer import Tokenizer
from generated.fireworks_completions import LogProbs, NewLogProbs, NewLogProbsContent, NewLogProbsContentTopLogProbs


@dataclass(frozen=True)
class TokenEntry:
    """One position's logprobs, generated or prompt (logprob None: the first prompt token)."""

    token_id: int
    logprob: float | None
    sampling_logprob: float | None
    top: tuple[tuple[int, float], ...]
    routing: tuple[int, ...] | None = None  # a mixture of experts' routing (api/completions/routing.py)


def generated_entries(logprobs: Sequence[TokenLogprob]) -> list[TokenEntry]:
    return [TokenEntry(lp.token_id, lp.logprob, lp.sampling_logprob, lp.top, lp.routing) for lp in logprobs]


def prompt_entries(prompt: Sequence[int], logprobs: Sequence[PromptTokenLogprob] | None,
                   count: float) -> list[TokenEntry]:
    """Entries of the prompt's last `count` tokens; `logprobs` covers positions 1 onwards."""
    by_position = {position: lp for position, lp in enumerate(logprobs or [], start=1)}
    first = max(0, len(prompt) - int(min(count, len(prompt))))
    entries = []
    for position in range(first, len(prompt)):
        lp = by_position.get(position)
        entries.append(TokenEntry(prompt[position], lp.logprob if lp else None, None, lp.top if lp else (),
                                  lp.routing if lp else None))
    return entries


class LogprobsWriter:
    """Formats entries for one choice, keeping the text offset across calls (a stream)."""

    def __init__(self, tokenizer: Tokenizer, content_format: bool, num_top: int, model: ModelConfig | None = None) -> None:
        self.tokenizer = tokenizer
        self.content_format = content_format
        self.num_top = num_top
        self.model = model  # for the content entries' routing_matrix (None: left null)
        self.offset = 0  # where the next token's text starts in the choice's text

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def token_bytes(self, token_id: int) -> list[int]:
        """The token's own bytes: a piece of a character stays exact, where its decoded
        text would be U+FFFD."""
        raw = self.tokenizer.token_bytes(token_id)
        return list(raw if raw is not None else self.token_text(token_id).encode())

    def write(self, entries: Sequence[TokenEntry]) -> LogProbs | NewLogProbs:
        texts = [self.token_text(entry.token_id) for entry in entries]
        offsets = []
        for text in texts:
            offsets.append(self.offset)
            self.offset += len(text)
        if self.content_format:
            return NewLogProbs(content=[self._content(e, t, o) for e, t, o in zip(entries, texts, offsets)])
        return self._legacy(entries, texts, offsets)

    def _legacy(self, entries, texts, offsets) -> LogProbs:
        tops = [None if entry.logprob is None else self._legacy_top(entry, text)
                for entry, text in zip(entries, texts)]
        return LogProbs.model_construct(tokens=texts, token_logprobs=[e.logprob for e in entries],
                                        top_logprobs=tops, text_offset=offsets)

    def _legacy_top(self, entry: TokenEntry, text: str) -> dict[str, float]:
        top = {self.token_text(token): logprob for token, logprob in entry.top[: self.num_top]}
        top.setdefault(text, entry.logprob)
        return top

    def _content(self, entry: TokenEntry, text: str, offset: int) -> NewLogProbsContent:
        top = [NewLogProbsContentTopLogProbs(token=self.token_text(token), logprob=logprob, token_id=token,
                                             bytes=self.token_bytes(token))
               for token, logprob in entry.top[: self.num_top]]
        fields = dict(token=text, logprob=entry.logprob, sampling_logprob=entry.sampling_logprob,
                      bytes=self.token_bytes(entry.token_id), top_logprobs=top, token_id=entry.token_id, text_offset=offset,
                      routing_matrix=routing_matrix(entry.routing, self.model) if self.model else None)
        if entry.logprob is None:
            return NewLogProbsContent.model_construct(**fields)
        return NewLogProbsContent(**fields)


def merge_logprobs(first: LogProbs | NewLogProbs, second: LogProbs | NewLogProbs) -> LogProbs | NewLogProbs:
    """Two stretches of one choice's logprobs (prompt, then output) as one."""
    if isinstance(first, NewLogProbs):
        return NewLogProbs(content=[*first.content, *second.content])
    return LogProbs.model_construct(**{
        name: [*getattr(first, name), *getattr(second, name)]
        for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset")})
