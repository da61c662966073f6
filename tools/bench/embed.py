"""Embeddings per second: Flint's encoder against sentence-transformers on torch's CPU (issue 48).

    python tools/bench.py embed [--model default|PATH] [--batches 1 32 256] [--peer-python PY] [--servers]

For each batch size B, B sentences of 32 to 256 tokens (common words, their token counts
spread evenly over the range, the same sentences for both) are embedded `--repeats` times
after a warm-up; a side's rate is B over its fastest time. Flint runs its encoder as the
server does (engine/device/encoder_runner.py: every bucket compiled first, not timed), without
HTTP; sentence-transformers runs `SentenceTransformer.encode(sentences, batch_size=B)` in a
process of `--peer-python` (a Python with sentence-transformers and torch: they are no
dependency of Flint's), with torch's threads at the machine's cores. Both sides' vectors of
the first batch are compared (the least cosine is printed), so the two computed the same thing.
With `--servers`, Flint's server is also measured against llama.cpp's llama-server through
HTTP (tools/bench/embed_servers.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from engine.device.encoder_runner import EncoderInput, EncoderRunner
from engine.loader.sentence_transformers import EMBEDDED_EMBEDDER_ID, embedded_embedder_path, load_encoder
from tools.bench.embed_servers import print_server_table, server_rates
from tools.bench.llama_server import converted_gguf

WORDS = ("the of and to in is was for on that with as by at from it his an were are which this be or has had "
         "not but first one their its new after who they have her she two been other when there all during into "
         "school time may years more most only over city some world would where later up such used many can "
         "state about national out known university united then made").split()
PEER = """
import json, os, sys, time
import torch
from sentence_transformers import SentenceTransformer
torch.set_num_threads(os.cpu_count())
folder, sentences_file, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
batches = json.load(open(sentences_file))
model = SentenceTransformer(folder, device="cpu")
best, first = {}, None
for size, sentences in batches.items():
    vectors = model.encode(sentences, batch_size=len(sentences))
    first = vectors.tolist() if first is None else first
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.encode(sentences, batch_size=len(sentences))
        times.append(time.perf_counter() - start)
    best[size] = min(times)
print(json.dumps({"best": best, "first": first, "torch": torch.__version__}))
"""


def sentences(tokenizer, count: int, seed: int, low: int = 32, high: int = 256) -> list[str]:
    """`count` sentences whose token counts (special tokens included) spread over [low, high]."""
    rng = np.random.default_rng(seed)
    made = []
    for target in np.linspace(low, high, count).astype(int) if count > 1 else [low + (high - low) // 2]:
        words = list(rng.choice(WORDS, size=target))
        while len(tokenizer.encode(" ".join(words))) > target:
            words.pop()
        made.append(" ".join(words))
    return made


def flint_rates(runner: EncoderRunner, batches: dict[int, list[str]], repeats: int) -> tuple[dict, np.ndarray]:
    best, first = {}, None
    for size, texts in batches.items():
        inputs = [EncoderInput(runner.checkpoint.tokenizer.encode(text)) for text in texts]
        vectors = runner.run(inputs)
        first = vectors if first is None else first
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            runner.run(inputs)
            times.append(time.perf_counter() - start)
        best[size] = min(times)
    return best, first


def checkpoint_folder(model_path: Path, scratch: Path) -> Path:
    """The checkpoint's folder: `model_path`, or its zip extracted into `scratch`."""
    if not model_path.is_file():
        return model_path
    with zipfile.ZipFile(model_path) as archive:
        archive.extractall(scratch / "model")
    return scratch / "model"


def peer_rates(python: str, model_path: Path, batches: dict[int, list[str]], repeats: int) -> dict:
    """sentence-transformers' times in a process of `python`, on the checkpoint extracted from its zip."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = checkpoint_folder(model_path, Path(scratch))
        batches_file = Path(scratch) / "batches.json"
        batches_file.write_text(json.dumps({str(size): texts for size, texts in batches.items()}))
        done = subprocess.run([python, "-c", PEER, str(folder), str(batches_file), str(repeats)], check=True,
                              capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="default", help="'default' (the embedded all-MiniLM-L6-v2) or a "
                        "sentence-transformers folder or zip")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer-python", default=None, help="a Python with sentence-transformers and torch "
                        "(default: none, Flint alone)")
    parser.add_argument("--servers", action="store_true", help="also Flint's server against llama-server "
                        "--embedding through HTTP (needs --peer-python for llama.cpp's converter)")


def embed_benchmark(args: argparse.Namespace) -> int:
    path = embedded_embedder_path() if args.model == "default" else Path(args.model)
    checkpoint = load_encoder(path, EMBEDDED_EMBEDDER_ID if args.model == "default" else None)
    runner = EncoderRunner(checkpoint)
    started = time.perf_counter()
    runner.warmup()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; model {checkpoint.id}; "
          f"{len(runner.compiled)} buckets compiled in {time.perf_counter() - started:.1f} s")
    high = min(256, checkpoint.max_tokens)
    batches = {size: sentences(checkpoint.tokenizer, size, args.seed + size, min(32, high), high) for size in args.batches}
    flint, flint_first = flint_rates(runner, batches, args.repeats)
    peer = peer_rates(args.peer_python, path, batches, args.repeats) if args.peer_python else None
    print("| sentences a batch | Flint embeddings/s | sentence-transformers (torch CPU) embeddings/s | ratio |")
    print("| --- | --- | --- | --- |")
    for size in args.batches:
        theirs = size / peer["best"][str(size)] if peer else None
        print(f"| {size} | {size / flint[size]:.1f} | {f'{theirs:.1f}' if theirs else '-'} | "
              f"{f'{size / flint[size] / theirs:.2f}x' if theirs else '-'} |")
    if peer:
        theirs = np.asarray(peer["first"])
        cosines = (flint_first * theirs).sum(1) / np.linalg.norm(flint_first, axis=1) / np.linalg.norm(theirs, axis=1)
        print(f"torch {peer['torch']}; least cosine between the two sides' vectors: {cosines.min():.6f}")
    if args.servers:
        with tempfile.TemporaryDirectory() as scratch:
            gguf = converted_gguf(checkpoint_folder(path, Path(scratch)), checkpoint.id, args.peer_python)
        results = server_rates(args.model, checkpoint.id, gguf, checkpoint.pooling.mode, batches, args.repeats, high)
        print_server_table(args.batches, results)
    return 0
