"""A checkpoint's served weights kept on disk, so that a restart maps them instead of
making them again.

Making the served weights of SmolLM2's GGUF takes about 3 s on a 2-core CPU: its Q4_1
tensors dequantized to float32 (2 s), then fused and quantized to int8 with group scales
(1.2 s, engine/device/weights.py `serving_weights`). The result, 250 MB, is written once to
a safetensors file under the data directory; a warm start memory-maps it and places it.

An entry is found by everything its contents depend on: the checkpoint's files (path,
size, modification time: engine/loader/kept.py `files_key`), the dtype and quantization,
the source of the code that makes the served form (a change to it makes new entries;
old ones are never read again), and the native kernels' blocks.

Where the engine packs the projections for the native CPU kernels (engine/models/layers.py
`packed_for_native`), the entry made at a first start is written again from the engine's
state, packed (`keep_packed`): packing a 1B model's 1.1 GB on the host took 4.9 s of every
warm start. The blocks the library was built for are part of the key, so an entry is only
ever read by a build that packs alike; an engine that does not use the kernels unpacks it.
A file that cannot be read is a miss, and the weights are made as before.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import logging
import mmap
import os
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from engine.config import EngineConfig
from engine.device import integer_weight as integer_form
from engine.device import layer_forms
from engine.device import weights as served_form
from engine.device import fp8 as fp8_form
from engine.device.fp8 import Fp8Weight, default_per_token_activations
from engine.device import native
from engine.device.native import ops as packed_form
from engine.device.native import small_values
from engine.device.native.ops import PackedWeight
from engine.device.integer_weight import Int8Weight
from engine.device.layer_forms import LayerForms, RowParts
from engine.device.weights import is_lora_slots, serving_weights
from engine.loader import gguf_blocks
from engine.loader.checkpoint import Checkpoint
from engine.loader.gguf_blocks import WeightFormats
from engine.loader.kept import files_key
from engine.loader.mapped import mapped_tensors
from engine.loader.source import ModelSource
from engine.loader.progress import WEIGHTS, Progress, StageCount

log = logging.getLogger("flint")

FORMAT = "flint-served-weights-2"  # 2: the tensors start aligned (`save`)
KEY_LENGTH = 32  # hex digits of an entry's key in its name
KEEP_PER_MODEL = 2  # entries kept of one model (say, two dtypes served from one data directory)
# safetensors' NumPy side has no bfloat16 or float8: such arrays are written as their bits.
BITS_OF = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8}


def entry_for(directory: str | os.PathLike | None, source: ModelSource, config: EngineConfig, mesh) -> Path | None:
    """Where the served weights of `source` under `config` (its dtype and quantization
    resolved) are kept between starts, or None where they are not: no directory, an Orbax
    checkpoint (restored straight onto the devices already), or weights spread over several
    devices or processes."""
    import jax

    if directory is None or source.format == "orbax" or mesh.size != 1 or jax.process_count() != 1:
        return None
    return entry_path(directory, source, config.dtype, config.quantization)


def make_and_keep(checkpoint: Checkpoint, config: EngineConfig, path: Path) -> dict:
    """The checkpoint's served weights (its params let go), written to `path` for the next
    start: a failure to write costs the next start the time, not this one its model."""
    served = serving_weights(checkpoint.config, checkpoint.params, config.dtype, config.quantization)
    checkpoint.params = None
    try:
        save(path, served, checkpoint.formats)
        prune(path)
    except OSError as error:
        log.warning("served weights not kept at %s: %s", path, error)
    return served


def keep_packed(path: Path, state: dict, formats: WeightFormats | None = None) -> None:
    """Write an engine's `state` (its decoder's, on one device: engine/models/llama.py
    `state_of`, with the projections packed for the native kernels) at `path` in place of
    the served weights made there this start: the next start maps them packed. Its adapter
    slots are left out (each start makes its own, empty)."""
    kept = {name: value for name, value in state.items() if name != "layers"}
    kept["layers"] = {name: value for name, value in state["layers"].items() if not is_lora_slots(name)}
    try:
        save(path, kept, formats)
    except OSError as error:
        log.warning("packed weights not kept at %s: %s", path, error)


def prune(newest: Path, keep: int = KEEP_PER_MODEL) -> None:
    """Remove all but the `keep` most recent entries of `newest`'s model: an upgrade, a
    changed file or another dtype makes a new entry, and old ones are never read again."""
    model = newest.name.rsplit("-", 1)[0]
    pattern = f"{model}-{'[0-9a-f]' * KEY_LENGTH}.safetensors"  # not another model whose name starts alike
    entries = sorted(newest.parent.glob(pattern), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in [entry for entry in entries if entry != newest][max(keep - 1, 0):]:
        old.unlink(missing_ok=True)


def entry_path(directory: str | os.PathLike, source: ModelSource, dtype: str, quantization: str) -> Path:
    """Where the served weights of `source` in `dtype` and `quantization` are kept."""
    # The code that makes the entry's weights and their layouts: a change to any makes new entries.
    forms = (served_form, integer_form, fp8_form, gguf_blocks, packed_form, small_values, layer_forms)
    code = hashlib.sha256("".join(inspect.getsource(module) for module in forms).encode()).hexdigest()
    blocks = [native.block_shape(), native.integer_dots()]  # how `keep_packed` packs, here
    key = hashlib.sha256(json.dumps([FORMAT, files_key(source.path), dtype, quantization, code, blocks]).encode())
    return Path(directory).expanduser() / f"{source.id}-{key.hexdigest()[:KEY_LENGTH]}.safetensors"


def save(path: Path, weights: dict, formats: WeightFormats | None = None) -> None:
    """Write the served pytree `weights` (host or single-device arrays) to `path`, whole or
    not at all (a temporary file renamed), with what a GGUF file's projections were read as
    (`formats`, for /health: `formats_of`)."""
    tensors, dtypes = {}, {}
    for key, array in _flatten(weights):
        array = np.asarray(array)
        if array.dtype.name in BITS_OF:
            dtypes[key] = array.dtype.name
            array = array.view(BITS_OF[array.dtype.name])
        tensors[key] = np.ascontiguousarray(array)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    metadata = {"format": FORMAT, "dtypes": json.dumps(dtypes), "padding": ""}
    if formats is not None:
        metadata["formats"] = formats.to_json()
    save_file(tensors, str(partial), metadata=metadata)
    # The tensors' bytes start right after the header: padded so that they start on
    # HOST_ALIGNMENT, a load maps the tensors that are so aligned with no copy at all.
    padding = -(8 + header_text_length(partial)) % HOST_ALIGNMENT
    if padding:
        save_file(tensors, str(partial), metadata={**metadata, "padding": " " * padding})
    partial.replace(path)


def header_text(path: Path) -> bytes:
    """A safetensors file's JSON header, with the spaces that pad it."""
    with path.open("rb") as file:
        return file.read(int.from_bytes(file.read(8), "little"))


def header_text_length(path: Path) -> int:
    """The length of a safetensors file's JSON header, without the spaces that pad it."""
    return len(header_text(path).rstrip(b" "))


def formats_of(path: Path) -> WeightFormats | None:
    """What `save` was told the GGUF file's projections were read as, or None."""
    try:
        text = (json.loads(header_text(path)).get("__metadata__") or {}).get("formats")
        return None if text is None else WeightFormats.from_json(text)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load(path: Path, progress: Progress | None = None) -> dict | None:
    """The served pytree kept at `path` as host arrays, or None where there is none that reads;
    `progress` is told each tensor read (engine/loader/progress.py)."""
    if not path.is_file():
        return None
    try:
        metadata, views = mapped_tensors(path)
        if metadata.get("format") != FORMAT:
            return None
        dtypes = json.loads(metadata.get("dtypes", "{}"))
        count = StageCount(progress, WEIGHTS, len(views))
        flat = {}
        for key, view in views.items():
            flat[key] = _widened(view if is_aligned(view) else aligned_copy(view), dtypes.get(key))
            count.advance()
    except (OSError, ValueError, KeyError, TypeError) as error:  # cut short, or not ours
        log.warning("served weights at %s cannot be read (%s): making them again", path, error)
        return None
    return _unflatten(flat)


HOST_ALIGNMENT = 64  # bytes: XLA's CPU client uses a host array so aligned in place, and copies others


def is_aligned(array: np.ndarray) -> bool:
    return array.ctypes.data % HOST_ALIGNMENT == 0


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """`array` copied into memory aligned for XLA's CPU client, whose device_put then takes
    it as it is instead of copying it again (on other devices it is copied either way)."""
    # An anonymous mapping: page-aligned, and in plain pages (NumPy asks large arrays of its
    # own for huge pages, whose zeroing and compaction made this copy 2-4 times slower).
    out = np.frombuffer(mmap.mmap(-1, max(array.nbytes, 1)), np.uint8)[: array.nbytes]
    out = out.view(array.dtype).reshape(array.shape)
    np.copyto(out, array)
    return out


def _widened(array: np.ndarray, dtype: str | None) -> np.ndarray:
    import ml_dtypes

    return array.view(getattr(ml_dtypes, dtype)) if dtype else array


def _flatten(weights: dict, prefix: str = ""):
    for name, value in weights.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            yield from _flatten(value, f"{key}/")
        elif isinstance(value, Int8Weight):  # offsets and factors where it has them
            yield f"{key}/{integer_values_key(value.bits, value.integer_dots)}", value.values
            yield from _parts(value, f"{key}/int8")
        elif isinstance(value, PackedWeight):
            yield f"{key}/{packed_values_key(value.bits, value.dots)}", value.values
            yield from _parts(value, f"{key}/packed")
        elif isinstance(value, LayerForms):  # each form's stack under the layers it holds
            yield from _flatten({forms_key(layers): stack for layers, stack in zip(value.layers, value.stacks)},
                                f"{key}/")
        elif isinstance(value, RowParts):  # each part in order
            yield from _flatten({f"{PART_PREFIX}{index}": part for index, part in enumerate(value.parts)}, f"{key}/")
        elif isinstance(value, Fp8Weight):
            yield f"{key}/fp8.values", value.values
            yield f"{key}/fp8.scales", value.scales
        else:
            yield key, value


PARTS = ("scales", "mins", "scale_factors", "min_factors")  # an integer weight's, beside its values


def _parts(weight, prefix: str):
    for part in PARTS:
        if getattr(weight, part) is not None:
            yield f"{prefix}.{part}", getattr(weight, part)


def _unflatten(flat: dict) -> dict:
    tree: dict = {}
    for key, array in flat.items():
        *parents, name = key.split("/")
        node = tree
        for parent in parents:
            node = node.setdefault(parent, {})
        node[name] = array
    return _rebuild_quantized(tree)


INTEGER_BITS = (8, 6, 4)  # an Int8Weight's and a PackedWeight's forms (engine/device/integer_weight.py)


def integer_values_key(bits: int, dots: bool) -> str:
    """The name of an Int8Weight's values, which says its static form: 4- or 6-bit values, and a
    GGUF file's blocks (multiplied over integer inputs where the CPU has them)."""
    return f"int{bits}{'.dots' if dots else ''}.values"


def packed_values_key(bits: int, dots: bool) -> str:
    """The name of a PackedWeight's values, which says its static form (engine/device/native/ops.py)."""
    return f"packed{bits}{'.dots' if dots else ''}.values"


FORMS_PREFIX = "layers."  # a LayerForms' stacks: each named by its layers ("layers.0.4.7")


def forms_key(layers: tuple[int, ...]) -> str:
    return FORMS_PREFIX + ".".join(map(str, layers))


def _rebuild_forms(node: dict) -> LayerForms | None:
    if not (node and all(name.startswith(FORMS_PREFIX) for name in node)):
        return None
    held = {tuple(int(layer) for layer in name[len(FORMS_PREFIX):].split(".")): name for name in node}
    layers = tuple(sorted(held))
    return LayerForms(stacks=tuple(_rebuild_quantized(node[held[each]]) for each in layers), layers=layers)


PART_PREFIX = "part."  # a RowParts' parts: "part.0", "part.1", ...


def _rebuild_parts(node: dict) -> RowParts | None:
    if not (node and all(name.startswith(PART_PREFIX) for name in node)):
        return None
    count = len(node)
    return RowParts(parts=tuple(_rebuild_quantized(node[f"{PART_PREFIX}{index}"]) for index in range(count)))


def _rebuild_packed(node: dict) -> PackedWeight | None:
    for bits, dots in itertools.product(INTEGER_BITS, (False, True)):
        values = packed_values_key(bits, dots)
        if values in node and set(node) <= {values, *(f"packed.{part}" for part in PARTS)}:
            return PackedWeight(values=node[values], bits=bits, dots=dots,
                                **{part: node.get(f"packed.{part}") for part in PARTS})
    return None


def _rebuild_quantized(node):
    if not isinstance(node, dict):
        return node
    if (packed := _rebuild_packed(node)) is not None:
        return packed
    if (forms := _rebuild_forms(node)) is not None:
        return forms
    if (parts := _rebuild_parts(node)) is not None:
        return parts
    for bits, dots in itertools.product(INTEGER_BITS, (False, True)):
        values = integer_values_key(bits, dots)
        if values in node and "int8.scales" in node and set(node) <= {values, *(f"int8.{part}" for part in PARTS)}:
            return Int8Weight(values=node[values], bits=bits, integer_dots=dots,
                              **{part: node.get(f"int8.{part}") for part in PARTS})
    if set(node) == {"fp8.values", "fp8.scales"}:
        return Fp8Weight(node["fp8.values"], node["fp8.scales"], default_per_token_activations())
    return {name: _rebuild_quantized(child) for name, child in node.items()}
