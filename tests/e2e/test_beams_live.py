"""Beam search on a live server with the embedded SmolLM2, through the `openai` SDK: the beams
come back as choices ordered by score, each score measured independently by the server's
own prompt scoring (echo with logprobs over the prompt followed by the beam)."""

from __future__ import annotations

MODEL_ID = "SmolLM2-135M-Instruct"
PROMPT = "The three primary colors are"
NUM_BEAMS = 4
MAX_TOKENS = 8


def beam_score(sdk, prompt_ids: list[int], beam_ids: list[int]) -> float:
    """The beam's summed model logprob over its length (length_penalty 1), read from the
    prompt logprobs of prompt + beam: the server scores the tokens, nothing is generated."""
    scored = sdk.completions.create(model=MODEL_ID, prompt=prompt_ids + beam_ids, max_tokens=0, echo=True,
                                    logprobs=0)
    logprobs = scored.choices[0].logprobs.token_logprobs[-len(beam_ids):]
    return sum(logprobs) / len(beam_ids)


def test_beams_are_distinct_choices_ordered_by_score(sdk):
    answer = sdk.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0,
                                    extra_body={"num_beams": NUM_BEAMS, "return_token_ids": True})
    choices = answer.choices
    assert [choice.index for choice in choices] == list(range(NUM_BEAMS))
    beams = [choice.model_extra["tokens"] for choice in choices]
    assert len({tuple(beam) for beam in beams}) == NUM_BEAMS
    prompt_ids = choices[0].model_extra["prompt_token_ids"]
    scores = [beam_score(sdk, prompt_ids, beam) for beam in beams]
    assert all(earlier >= later - 1e-3 for earlier, later in zip(scores, scores[1:])), scores
