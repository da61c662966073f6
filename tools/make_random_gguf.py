"""A random Llama written as an F16 GGUF with the embedded SmolLM2's tokenizer: a model of a
size worth measuring (Llama-3.2-1B's shapes by default) for `make bench-serve --model`, which
llama.cpp's own `llama-quantize` can turn into Q4_K_M. Random weights measure speed, not
quality (quality is measured on SmolLM2).

    python tools/make_random_gguf.py /tmp/llama-1b-f16.gguf [--shape llama-3.2-1b] [--seed 0]

Weights are drawn layer by layer and streamed into the file (the writer's tensor infos first,
then each tensor's data), so the model is never held whole: about a tensor's float32 draw.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.loader.source import embedded_gguf_path  # noqa: E402


@dataclass(frozen=True)
class Shape:
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rope_theta: float = 500000.0
    context: int = 8192


SHAPES = {
    "llama-3.2-1b": Shape(hidden=2048, intermediate=8192, layers=16, heads=32, kv_heads=8, head_dim=64),
    "tiny": Shape(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, head_dim=16, context=512),
}


def tensor_shapes(shape: Shape, vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor's [out, in] shape, in the order written (tied embeddings, as Llama 3.2's)."""
    s = shape
    shapes = {"token_embd.weight": (vocab, s.hidden), "output_norm.weight": (s.hidden,)}
    for i in range(s.layers):
        shapes.update({f"blk.{i}.attn_norm.weight": (s.hidden,), f"blk.{i}.attn_q.weight": (s.heads * s.head_dim, s.hidden),
                       f"blk.{i}.attn_k.weight": (s.kv_heads * s.head_dim, s.hidden),
                       f"blk.{i}.attn_v.weight": (s.kv_heads * s.head_dim, s.hidden),
                       f"blk.{i}.attn_output.weight": (s.hidden, s.heads * s.head_dim),
                       f"blk.{i}.ffn_norm.weight": (s.hidden,), f"blk.{i}.ffn_gate.weight": (s.intermediate, s.hidden),
                       f"blk.{i}.ffn_up.weight": (s.intermediate, s.hidden),
                       f"blk.{i}.ffn_down.weight": (s.hidden, s.intermediate)})
    return shapes


def random_tensor(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Norms around 1, matrices scaled by 1/sqrt(fan-in): activations keep unit scale."""
    values = rng.standard_normal(shape, dtype=np.float32)
    if name.endswith("norm.weight"):
        return (1.0 + 0.1 * values).astype(np.float32)  # vectors stay float32, as llama.cpp writes them
    scale = 1.0 if name == "token_embd.weight" else 1.0 / np.sqrt(shape[-1])
    return (values * scale).astype(np.float16)


def copy_tokenizer(writer: gguf.GGUFWriter, source: gguf.GGUFReader) -> int:
    """The source's tokenizer and chat template, key by key; its vocabulary's size."""
    for name, field in source.fields.items():
        if name.startswith("tokenizer."):
            sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub_type)
    return len(source.fields["tokenizer.ggml.tokens"].data)


def write_random_gguf(path: Path, shape: Shape, seed: int = 0) -> Path:
    source = gguf.GGUFReader(str(embedded_gguf_path()))
    writer = gguf.GGUFWriter(str(path), arch="llama")
    s = shape
    writer.add_name(f"random-llama-{s.layers}x{s.hidden}")
    writer.add_block_count(s.layers)
    writer.add_context_length(s.context)
    writer.add_embedding_length(s.hidden)
    writer.add_feed_forward_length(s.intermediate)
    writer.add_head_count(s.heads)
    writer.add_head_count_kv(s.kv_heads)
    writer.add_key_length(s.head_dim)
    writer.add_value_length(s.head_dim)
    writer.add_rope_dimension_count(s.head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(s.rope_theta)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    vocab = copy_tokenizer(writer, source)
    writer.add_vocab_size(vocab)
    shapes = tensor_shapes(shape, vocab)
    for name, dims in shapes.items():
        dtype = np.float32 if len(dims) == 1 else np.float16
        writer.add_tensor_info(name, dims, np.dtype(dtype), int(np.prod(dims)) * np.dtype(dtype).itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, dims in shapes.items():
        writer.write_tensor_data(random_tensor(name, dims, rng))
    writer.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.2-1b")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_random_gguf(args.output, SHAPES[args.shape], args.seed)
    print(f"wrote {args.output} ({args.output.stat().st_size / 2**30:.2f} GiB)")


if __name__ == "__main__":
    main()
