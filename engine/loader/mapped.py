"""A safetensors file's tensors as views of the file, mapped copy-on-write.

Used where safetensors' own reader does not serve: the served weights kept between starts
(engine/loader/served_cache.py, no copy made), and FP8 checkpoints (engine/loader/
fp8_checkpoint.py: safetensors' NumPy reader has no float8 dtype).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import ml_dtypes
import numpy as np

# safetensors' dtype names. NumPy has no bfloat16 or float8 (safetensors' own NumPy reader
# refuses them); ml_dtypes provides both.
SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
                      "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16,
                      "U8": np.uint8, "BOOL": np.bool_, "BF16": ml_dtypes.bfloat16,
                      "F8_E4M3": ml_dtypes.float8_e4m3fn}


def mapped_tensors(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """The file's metadata and each tensor as a view of the file mapped copy-on-write.

    safetensors' own layout (an 8-byte little-endian header length, a JSON header giving each
    tensor's dtype, shape and byte range, then the bytes), read here rather than through
    safe_open because its NumPy reader copies every tensor into memory of its own, which
    the runner's device_put then copied again. A view aligned for XLA's CPU client is used
    in place, so the weights are the file's pages (in the page cache, read as the first
    steps touch them); others are copied once (`aligned_copy`). The mapping is private:
    nothing the process does can change the file, and the file, replaced or removed by
    another start, stays mapped as it was (served_cache.py `save` and `prune` never write one
    in place)."""
    with path.open("rb") as file:
        header_length = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(header_length))
    metadata = header.pop("__metadata__", None) or {}
    data_start, size = 8 + header_length, path.stat().st_size
    views = {}
    for key, entry in header.items():
        start, end = entry["data_offsets"]
        if not 0 <= start <= end <= size - data_start:
            raise ValueError(f"tensor {key} lies outside the file")
        views[key] = _mapped(path, data_start + start, SAFETENSORS_DTYPES[entry["dtype"]], tuple(entry["shape"]))
    return metadata, views


def _mapped(path: Path, offset: int, dtype, shape: tuple[int, ...]) -> np.ndarray:
    """One tensor in a copy-on-write mapping of its own: a tensor the model replaces (the
    embedding it narrows to bfloat16) is unmapped once let go, its pages no longer counted
    as the server's. An empty one maps nothing (a mapping cannot be empty)."""
    if not math.prod(shape):
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="c", offset=offset, shape=shape)
