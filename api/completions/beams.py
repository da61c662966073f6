"""Friendli's beam search on /v1/completions (seed 004): `num_beams`, `length_penalty`,
`early_stopping` and `beam_search_type`.

`num_beams` from 2 to 31 runs one beam search per prompt (engine/host/beam_search.py), and its
hypotheses, best first, are that prompt's choices: prompt p's are choices
p x num_beams + i. `num_beams` 1 is no beam search (a plain decode), as in Hugging Face.

The seed's rules, each a 400 naming the field: streaming and `n` are not served with beams;
stop strings neither (`stop_tokens` are, ending the search once every beam holds one); and
a DETERMINISTIC search takes no sampling controls (`top_k`, `top_p`, `min_p`,
`typical_p`, and a temperature other than 0 or 1), since it draws nothing. The sampling
types (NAIVE_SAMPLING, STOCHASTIC) need a temperature above 0. `length_penalty` and
`early_stopping` are only for a beam search, and `length_penalty` lies in [-10, 10] (a
larger exponent overflows the length normalization); `beam_search_type` without one is ignored, as
the seed says. What a beam does not produce is refused beside it: per-token logprobs and
logits, streamed events, constrained formats and predicted outputs.
"""

from __future__ import annotations

from typing import Any

from api.core.errors import invalid
from api.core.sampling import check_range
from engine.host.request import MAX_BEAMS, MAX_LENGTH_PENALTY, BeamSearchParams

# Sampling controls a DETERMINISTIC search refuses, with the values that ask for nothing.
DRAW_CONTROLS = {"top_k": (0, -1), "top_p": (1,), "min_p": (0,), "typical_p": (1,), "temperature": (0, 1)}
# Fields whose feature a beam search does not serve, with the values that ask for nothing.
NOT_WITH_BEAMS = {
    "stream": (False,), "stop": ([], ""), "logprobs": (False,), "top_logprobs": (0,),
    "include_output_logprobs": (False,), "include_output_logits": (False,), "response_format": (),
    "prediction": (), "speculation": (),
}


def beam_params(body: Any) -> BeamSearchParams | None:
    """The request's beam search, or None when it asks for none (400 for what cannot go with it)."""
    num_beams = 1 if body.num_beams is None else int(check_range("num_beams", body.num_beams, 1, MAX_BEAMS,
                                                                 integer=True))
    if num_beams == 1:
        refuse_beam_only_fields(body)
        return None
    search_type = str(getattr(body.beam_search_type, "value", body.beam_search_type or "DETERMINISTIC"))
    refuse_alongside(body, search_type)
    length_penalty = 1.0 if body.length_penalty is None else float(
        check_range("length_penalty", body.length_penalty, -MAX_LENGTH_PENALTY, MAX_LENGTH_PENALTY))
    return BeamSearchParams(num_beams=num_beams, length_penalty=length_penalty,
                            early_stopping=bool(body.early_stopping), search_type=search_type)


def refuse_beam_only_fields(body: Any) -> None:
    for name, neutral in (("length_penalty", 1.0), ("early_stopping", False)):
        value = getattr(body, name)
        if value is not None and value != neutral:
            raise invalid(name, f"`{name}` is only for beam search: set `num_beams` above 1")


def refuse_alongside(body: Any, search_type: str) -> None:
    """400 for a field the beam search cannot serve as given."""
    for name in ("max_tokens", "max_completion_tokens"):
        if getattr(body, name, None) == 0:
            raise invalid(name, "a beam search generates at least one token")
    if body.n is not None and body.n != 1:
        raise invalid("n", "`n` is not supported with beam search: the beams are the choices")
    for name, neutral in NOT_WITH_BEAMS.items():
        if asks_for(getattr(body, name, None), neutral):
            raise invalid(name, f"`{name}` is not supported with beam search")
    if search_type == "DETERMINISTIC":
        for name, neutral in DRAW_CONTROLS.items():
            if asks_for(getattr(body, name), neutral):
                raise invalid(name, f"`{name}` controls random sampling, which a DETERMINISTIC beam search "
                                    "does not do; use beam_search_type NAIVE_SAMPLING or STOCHASTIC")
    elif body.temperature is not None and body.temperature <= 0:
        raise invalid("temperature", f"a {search_type} beam search samples: `temperature` must be above 0")


def asks_for(value: Any, neutral: tuple) -> bool:
    """Whether a field's value asks for something (None and the neutral values do not;
    a boolean is compared only with booleans, so that `logprobs: 0` is not `false`)."""
    return value is not None and not any(value == plain and isinstance(value, bool) == isinstance(plain, bool)
                                         for plain in neutral)
