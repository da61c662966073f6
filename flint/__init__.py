"""Flint inside a Python program: `LLM` generates offline, in this process, through the same
engine `flint serve` runs (continuous batching, the compiled buckets, the fused sampler).

    from flint import LLM, SamplingParams

    llm = LLM()  # the embedded SmolLM2-135M-Instruct
    for result in llm.generate(["The capital of France is"], SamplingParams(max_tokens=8, temperature=0)):
        print(result.outputs[0].text)
"""

from flint.llm import LLM
from flint.outputs import CompletionOutput, Logprob, RequestOutput
from flint.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob"]
