"""The tools the tool-calling tests of every dialect offer the tiny random model: argument
schemas bounded (enums, bounded integers, no extra properties), so that a random walk
through them ends well within the token limit.

Under `tool_choice: auto` the model itself decides between text and calls, and the random
model never writes a call's trigger on its own. So the tests of auto steer each answer into
one branch at the engine's door: `force_calls` makes the first output tokens some text and the
trigger (as a model that decides to call writes them), after which the auto grammar alone
must make the rest valid calls; `forbid_calls` bans every token that holds the trigger's first
character, so that the answer can only be text."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from api.core.tool_format import HERMES
from engine.host.request import Request

WEATHER = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["unit", "days"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["utc", "cet", "pst"]}}, "required": ["zone"],
        "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
# The tiny app's chat template renders no tools, so its calls take Flint's default format.
TRIGGER = HERMES.trigger


@dataclasses.dataclass
class Steered:
    """The engine requests of a test, as changed, and the text the engine generated for each."""

    requests: list[Request] = dataclasses.field(default_factory=list)
    texts: dict[str, str] = dataclasses.field(default_factory=dict)  # request id -> its whole output text

    def offered_calls(self) -> bool:
        """Whether every request was free to call a tool (its grammar holds the trigger), so
        that the branch taken was the model's, steered."""
        return bool(self.requests) and all(request.grammar is not None and TRIGGER in request.grammar.text
                                           for request in self.requests)

    def answers(self) -> list[str]:
        """The texts generated, in sorted order (to compare with the n choices of one answer)."""
        return sorted(self.texts.values())

    def last_answer(self) -> str:
        return self.texts[self.requests[-1].request_id]


def steer(client, monkeypatch, change: Callable[[Request], Request]) -> Steered:
    """Every engine request of `client`'s app passes through `change` on its way in, for the
    rest of the test."""
    engine = client.app.state.server.running_engine
    original, steered = engine.generate, Steered()

    async def generate(request: Request):
        request = change(request)
        steered.requests.append(request)
        steered.texts[request.request_id] = ""
        outputs = original(request)
        try:
            async for output in outputs:
                steered.texts[request.request_id] += output.text
                yield output
        finally:
            await outputs.aclose()  # a client that left early still aborts the request

    monkeypatch.setattr(engine, "generate", generate)
    return steered


def with_sampling(request: Request, **changes) -> Request:
    return dataclasses.replace(request, sampling=dataclasses.replace(request.sampling, **changes))


def force_calls(client, monkeypatch, lead: str = "") -> Steered:
    """The model writes `lead` and then the calls' trigger first, whatever it would say."""
    forced = tuple(client.app.state.server.tokenizer.encode(lead + TRIGGER))
    return steer(client, monkeypatch, lambda request: with_sampling(request, forced_output_tokens=forced))


def forbid_calls(client, monkeypatch) -> Steered:
    """The model can never write the trigger: every token whose text holds its `<` is banned."""
    tokenizer = client.app.state.server.tokenizer
    banned = tuple((token,) for token in range(tokenizer.vocab_size) if TRIGGER[0] in tokenizer.decode([token]))
    assert banned, "the vocabulary spells `<` somehow"
    return steer(client, monkeypatch, lambda request: with_sampling(request, bad_word_tokens=banned))

