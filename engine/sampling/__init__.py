"""The fused sampling step: SamplingParams declarations, their device rows, and `sample`.

Host side: params.py declares each per-row parameter once; arrays.py lays the rows out
(SamplingArrays); inputs.py writes one sequence into its row (RowSampling, fill_row);
masks.py works out token bans and packed allowed-token masks.
Device side, under jit: sampler.py (`sample`) runs processors.py (penalties, logit bias,
allowed mask), then the narrow path (candidates.py) or the full-vocabulary path, both on
the rules of filters.py (bisection.py: the full path's exact fallback), then mirostat.py,
draw.py and logprobs.py; topk.py finds a row's best tokens.

The public names below are imported lazily, on first use: engine/host/request.py imports
params.py, and host-only modules that import it (sequence, scheduler) must not load JAX
along with the rest of this package.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "SamplingParams": "params", "RowSpec": "params", "declared_rows": "params", "MAX_LOGPROBS": "params",
    "MAX_LOGIT_BIAS": "params",
    "SamplingArrays": "arrays", "empty_sampling_arrays": "arrays",
    "RowSampling": "inputs", "fill_row": "inputs",
    "sample": "sampler", "SampleResult": "sampler", "NUM_TOP_LOGPROBS": "sampler",
    "TokenLogprobs": "logprobs", "PromptLogprobs": "logprobs", "prompt_logprobs": "logprobs",
    "empty_prompt_logprobs": "logprobs",
    "initial_mu": "mirostat",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
