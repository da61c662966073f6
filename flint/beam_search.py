"""`BeamSearchParams` for `LLM.beam_search`, as vLLM names them."""

from __future__ import annotations

from dataclasses import dataclass

from flint.sampling_params import SamplingParams


@dataclass(frozen=True)
class BeamSearchParams:
    beam_width: int  # hypotheses kept at each step, and returned
    max_tokens: int
    ignore_eos: bool = False
    length_penalty: float = 1.0  # a finished hypothesis scores its summed logprob / length ** this

    def sampling(self) -> SamplingParams:
        """The sampling of the search's one engine request (its beams are the engine's)."""
        return SamplingParams(temperature=0, max_tokens=self.max_tokens, ignore_eos=self.ignore_eos)
