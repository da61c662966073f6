"""Replies from an engine in this process (`flint chat --local`): the conversation through the
model's chat template, its thinking kept apart as the server keeps it, stepped here.

A Ctrl-C must not land inside a step, which would leave the engine's bookkeeping half
updated: while a reply is generated, SIGINT only raises a flag, which is read between steps;
the request is then aborted and the interrupt raised."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import closing, contextmanager
from itertools import count

from api.core.reasoning import NOTHING_ASKED
from api.core.reasoning_prompt import plan_reasoning
from api.terminal.session import ChatSession
from api.terminal.transport import ChatError, Delta
from engine.engine import Engine
from engine.host.request import Request, RequestOutput, SamplingParams, StopCriteria
from engine.text.chat_template import ChatTemplateError
from flint.llm import LLM


class LocalChat:
    """The chat's transport to `engine`, which serves `model` (its name, for the first line)."""

    def __init__(self, engine: Engine, model: str) -> None:
        self.engine, self.model = engine, model
        self.llm = LLM.from_engine(engine)  # flint's Python API: the one path to the engine
        self.request_ids = (f"chat-{number}" for number in count())

    def describe(self) -> str:
        return f"{self.model} in this process"

    def stream(self, session: ChatSession) -> Iterator[Delta]:
        with interrupts_deferred() as interrupted:
            request = self.request(session)
            try:
                outputs = self.llm.stream_request(request)
            except ValueError as error:
                raise ChatError(str(error)) from None
            yield from self.outputs(outputs, interrupted)

    def request(self, session: ChatSession) -> Request:
        """The engine request for the next reply: at most session.max_tokens, and never past the context."""
        tokenizer, max_model_len = self.engine.tokenizer, self.engine.config.max_model_len
        try:
            prompt_ids = tokenizer.encode_chat(tokenizer.render_chat_prompt(session.conversation()))
        except ChatTemplateError as error:
            raise ChatError(f"the chat template refused the conversation: {error}") from None
        room = max_model_len - len(prompt_ids)
        if room < 1:
            raise ChatError(f"the conversation's {len(prompt_ids)} tokens fill the context window of "
                            f"{max_model_len}: /reset (or --max-model-len) to go on")
        reasoning = plan_reasoning(tokenizer, NOTHING_ASKED).engine_reasoning(prompt_ids, tokenizer)
        sampling = SamplingParams() if session.temperature is None else SamplingParams(temperature=session.temperature)
        stop = StopCriteria(max_tokens=min(session.max_tokens or room, room))
        return Request(next(self.request_ids), prompt_ids, sampling, stop, reasoning=reasoning)

    @staticmethod
    def outputs(outputs: Iterator[RequestOutput], interrupted) -> Iterator[Delta]:
        with closing(outputs):  # done, interrupted, or the reader went away: the engine is left idle
            for output in outputs:
                if interrupted():
                    raise KeyboardInterrupt
                if output.finish_reason == "error":
                    raise ChatError("the engine failed on this reply")
                if output.reasoning_text or output.text:
                    yield Delta(output.reasoning_text, output.text)


@contextmanager
def interrupts_deferred() -> Iterator:
    """SIGINT raises a flag instead of KeyboardInterrupt; yields the flag's reader."""
    raised = []
    previous = signal.signal(signal.SIGINT, lambda *_: raised.append(True))
    try:
        yield lambda: bool(raised)
    finally:
        signal.signal(signal.SIGINT, previous)
