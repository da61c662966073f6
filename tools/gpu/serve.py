"""`flint serve` on the accelerator, driven over HTTP with the `openai` SDK (tools/gpu_check.sh).

    python3 -m tools.gpu.serve [--tokenizer DIR] [--out gpu_serve.json]   on a GPU, bfloat16
    python3 -m tools.gpu.serve --smoke [--out FILE]                       on the CPU, float32 (tests)

The embedded GGUF is larger than what a device run may carry, so the model is a small random
Llama written here: SmolLM2's tokenizer (carried as files, which tools/gpu_wheels.sh writes to
.whl/tokenizer; without them, read from the embedded model) and head_dim 64, a shape the GPU
kernel serves. The server must say on /health that it attends with the Mosaic GPU kernel (on a
GPU), and each answer must be right by a property that holds whatever the weights:
- completions: a greedy token is the most likely one, so its logprob tops its alternatives;
- chat: an assistant message, ended by a stop or the length limit;
- a stream: its text is the greedy text the same request gives unstreamed;
- structured output: the content parses and validates against the JSON schema asked for;
- beam search: as many distinct beams as asked for.
Writes every check's result as JSON to --out; exits 1 if one fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import traceback
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import httpx

from tools.bench.server_process import free_port, start_server

MODEL_ID = "gpu-serve-tiny"
# Three buckets (1, 4 and 8 tokens): few compiles. Four sequences hold the three beams.
SERVE_FLAGS = ["--max-model-len", "512", "--max-num-seqs", "4", "--max-num-batched-tokens", "8",
               "--quantization", "none"]
PROMPT = "The three primary colors are"
SCHEMA = {"type": "object", "properties": {"name": {"enum": ["ada", "grace"]}, "admin": {"type": "boolean"}},
          "required": ["name", "admin"], "additionalProperties": False}
NUM_BEAMS = 3


def write_model(directory: Path, tokenizer_dir: Path | None) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer, as an Orbax checkpoint `flint serve` loads."""
    from engine.config import ModelConfig
    from engine.loader.orbax import save_orbax
    from engine.models.params import random_params

    if tokenizer_dir is None:
        tokenizer_dir = directory.with_name("tokenizer")
        tokenizer_dir.mkdir(parents=True, exist_ok=True)
        write_embedded_tokenizer(tokenizer_dir)
    vocab_size = json_vocab_size(tokenizer_dir / "tokenizer.json")
    config = ModelConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=512, num_layers=2,
                         num_heads=8, num_kv_heads=2, head_dim=64, max_position_embeddings=2048)
    save_orbax(directory, config, random_params(config, seed=0))
    for file in tokenizer_dir.iterdir():
        shutil.copy(file, directory / file.name)
    return directory


def write_embedded_tokenizer(out: Path) -> None:
    """The embedded SmolLM2's tokenizer as Hugging Face files (what gpu_wheels.sh carries)."""
    from engine.loader.checkpoint import load_checkpoint
    from tools.convert import write_gguf_tokenizer

    write_gguf_tokenizer(load_checkpoint(None).gguf_fields, out)


def json_vocab_size(path: Path) -> int:
    document = json.loads(path.read_text())
    ids = list(document["model"]["vocab"].values()) + [token["id"] for token in document.get("added_tokens", [])]
    return max(ids) + 1


def serve_command(model: Path, dtype: str, port: int, work: Path) -> list[str]:
    """`flint serve` through api.server.cli: wheels installed with --target have no console scripts."""
    return [sys.executable, "-m", "api.server.cli", "serve", "--model", str(model), "--port", str(port), "--dtype", dtype,
            "--data-dir", str(work / "data"), *SERVE_FLAGS]


def check_completions(client) -> str:
    choice = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=12, temperature=0, logprobs=3,
                                       extra_body={"ignore_eos": True}).choices[0]
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == 12, logprobs.tokens
    for token, logprob, alternatives in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert logprob <= 0 and logprob >= max(alternatives.values()) - 1e-2, (token, logprob, alternatives)
    return f"12 greedy tokens, each the most likely: {choice.text!r}"


def check_chat(client) -> str:
    choice = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Say hi."}],
                                            max_tokens=16, temperature=0).choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length"), choice.finish_reason
    return f"finish_reason {choice.finish_reason}: {choice.message.content!r}"


def check_stream(client) -> str:
    request = dict(model=MODEL_ID, prompt=PROMPT, max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    whole = client.completions.create(**request).choices[0].text
    streamed = "".join(chunk.choices[0].text for chunk in client.completions.create(**request, stream=True)
                       if chunk.choices)
    assert streamed == whole, (streamed, whole)
    return f"the streamed text is the unstreamed one ({len(whole)} characters)"


def check_structured(client) -> str:
    format_ = {"type": "json_schema", "json_schema": {"name": "user", "schema": SCHEMA, "strict": True}}
    content = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "A user."}],
                                             max_tokens=64, response_format=format_).choices[0].message.content
    user = json.loads(content)  # SCHEMA's rules, checked by hand: the GPU image has no jsonschema
    assert set(user) == {"name", "admin"} and user["name"] in ("ada", "grace") and isinstance(user["admin"], bool)
    return f"validates: {content}"


def check_beams(client) -> str:
    choices = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=6, temperature=0,
                                        extra_body={"num_beams": NUM_BEAMS}).choices
    texts = [choice.text for choice in choices]
    assert len(choices) == NUM_BEAMS and len(set(texts)) == NUM_BEAMS, texts
    return f"{NUM_BEAMS} distinct beams"


CHECKS = {"completions": check_completions, "chat": check_chat, "stream": check_stream,
          "structured output": check_structured, "beam search": check_beams}


def run_checks(base_url: str) -> dict[str, dict]:
    import openai

    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    results = {}
    for name, check in CHECKS.items():
        try:
            results[name] = {"passed": True, "detail": check(client)}
        except Exception as error:  # noqa: BLE001 - every check reports, whatever the others do
            traceback.print_exc()
            results[name] = {"passed": False, "detail": f"{type(error).__name__}: {error}"}
        print(f"{name}: {'pass' if results[name]['passed'] else 'FAIL'}: {results[name]['detail']}", flush=True)
    return results


def cpu_attention() -> str:
    """What `auto` serves this head_dim-64 model with on the CPU: the native kernel where it was
    built (engine/device/native), else the jnp reference."""
    from engine.device import native

    return "native_cpu" if native.available() else "reference"


def serve_and_check(smoke: bool, tokenizer_dir: Path | None, timeout: float) -> dict:
    import jax

    on_gpu = not smoke and jax.default_backend() == "gpu"
    dtype = "bfloat16" if on_gpu else "float32"
    with tempfile.TemporaryDirectory() as directory, ExitStack() as stack:
        work = Path(directory)
        model = write_model(work / MODEL_ID, tokenizer_dir)  # the directory names the served model
        port = free_port()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        server = start_server("flint", serve_command(model, dtype, port, work), port, work / "serve.log", stack,
                              timeout, env)
        attention = httpx.get(f"{server.url}/health", timeout=10).json().get("attention", {})
        results = run_checks(server.url)
        expected = "mosaic_gpu" if on_gpu else cpu_attention()
        results["attention"] = {"passed": attention.get("in_use") == expected,
                                "detail": f"serving with {attention.get('in_use')} (expected {expected}); "
                                          f"{attention.get('reason') or 'no fallback'}"}
    return {"device": jax.devices()[0].device_kind, "dtype": dtype, "checks": results,
            "passed": all(result["passed"] for result in results.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="on the CPU in float32 (tests)")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="SmolLM2's tokenizer files (default: .whl/tokenizer when there, else the embedded model)")
    parser.add_argument("--out", type=Path, default=None, help="write the result here as JSON")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for the server to turn healthy")
    args = parser.parse_args(argv)
    carried = ROOT / ".whl" / "tokenizer"
    tokenizer_dir = args.tokenizer or (carried if (carried / "tokenizer.json").exists() else None)
    result = serve_and_check(args.smoke, tokenizer_dir, args.timeout)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"flint serve on {result['device']} ({result['dtype']}): " + ("PASS" if result["passed"] else "FAIL"))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
