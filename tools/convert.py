"""Convert a GGUF file or a Hugging Face directory into an Orbax checkpoint.

    python tools/convert.py SRC OUT [--overwrite]

GGUF dequantization happens once here, so serving from OUT skips it
and can read each device's shard straight onto it. OUT is then self-contained, like a
Hugging Face directory: the tokenizer files of a Hugging Face source are copied into it,
and a GGUF's tokenizer metadata is written out as tokenizer.json, tokenizer_config.json
and generation_config.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "generation_config.json", "chat_template.jinja")


def convert(src: str | Path, out: str | Path, overwrite: bool = False):
    """Write the Orbax checkpoint of `src` to `out`; return (its Checkpoint, OUT's entries)."""
    from engine.loader.checkpoint import load_checkpoint
    from engine.loader.orbax import save_orbax

    checkpoint = load_checkpoint(src)
    out = save_orbax(out, checkpoint.config, checkpoint.params, overwrite=overwrite,
                     source=str(checkpoint.source.path))
    if checkpoint.source.format == "hf":
        for name in TOKENIZER_FILES:
            if (checkpoint.source.path / name).is_file():
                shutil.copy2(checkpoint.source.path / name, out / name)
    elif checkpoint.gguf_fields is not None and "tokenizer.ggml.tokens" in checkpoint.gguf_fields:
        try:
            write_gguf_tokenizer(checkpoint.gguf_fields, out)
        except ValueError as error:  # the weights are still worth having
            print(f"warning: no tokenizer written: {error}", file=sys.stderr)
    return checkpoint, sorted(out.iterdir())


def write_gguf_tokenizer(fields, out: Path) -> None:
    """Write the tokenizer that GGUF metadata `fields` describe as Hugging Face files in `out`,
    which engine.tokenizer.Tokenizer.from_hf_directory reads back to the same tokenizer."""
    from engine.text.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_gguf(fields)
    eos = tokenizer.eos_token_ids

    def text(token_id: int | None) -> str | None:
        return None if token_id is None else tokenizer.id_to_token(token_id)

    # No add_bos_token key: tokenizer.json's post-processor already adds BOS as llama.cpp
    # would, and the key would override it.
    config = {"bos_token": text(tokenizer.bos_token_id), "eos_token": text(eos[0] if eos else None),
              "pad_token": text(tokenizer.pad_token_id), "chat_template": tokenizer.chat_template}
    generation = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": list(eos)}
    (out / "tokenizer.json").write_text(tokenizer.to_json_str(), encoding="utf-8")
    for name, document in (("tokenizer_config.json", config), ("generation_config.json", generation)):
        (out / name).write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n",
                                encoding="utf-8")


def _num_bytes(params: dict) -> int:
    import jax

    return sum(leaf.nbytes for leaf in jax.tree.leaves(params))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", help="a .gguf file or a Hugging Face directory")
    parser.add_argument("out", help="the Orbax checkpoint directory to write")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a checkpoint already in OUT")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    checkpoint, written = convert(args.src, args.out, overwrite=args.overwrite)
    config = checkpoint.config
    print(f"wrote {Path(args.out).resolve()} in {time.perf_counter() - start:.1f} s: "
          f"{config.num_layers} layers, hidden {config.hidden_size}, vocab {config.vocab_size}, "
          f"{_num_bytes(checkpoint.params) / 2**20:.1f} MiB of float32 weights")
    for path in written:
        print(f"  {path.name}{'/' if path.is_dir() else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
