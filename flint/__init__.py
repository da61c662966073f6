"""Flint inside a Python program: `LLM` generates offline, in this process, through the same
engine `flint serve` runs (continuous batching, the compiled buckets, the fused sampler).

    from flint import LLM, SamplingParams

    llm = LLM()  # the embedded SmolLM2-135M-Instruct
    for result in llm.generate(["The capital of France is"], SamplingParams(max_tokens=8, temperature=0)):
        print(result.outputs[0].text)
"""

from flint.async_llm import AsyncLLM
from flint.beam_search import BeamSearchParams
from flint.llm import LLM
from flint.outputs import BeamSearchOutput, BeamSearchSequence, CompletionOutput, Logprob, RequestOutput
from flint.sampling_params import SamplingParams
from flint.structured_outputs import StructuredOutputsParams

__all__ = ["LLM", "AsyncLLM", "SamplingParams", "StructuredOutputsParams", "BeamSearchParams", "RequestOutput",
           "CompletionOutput", "Logprob", "BeamSearchOutput", "BeamSearchSequence"]
