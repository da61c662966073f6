"""The `flint` command."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from api.server.local_engine import load_local_engine
from api.server.serve import (EXIT_BAD_ARGUMENTS, add_compilation_cache_arguments, add_device_arguments,
                              add_download_argument, add_serve_arguments, serve)
from api.terminal.chat import add_chat_parser, chat

if TYPE_CHECKING:  # the engine (and JAX) load only when a command needs them
    from api.server.progress import FirstTokenSpinner
    from engine.engine import Engine

MODEL_HELP = ("a .gguf file, a Hugging Face directory, an Orbax checkpoint, or a Hugging Face repo id (ORG/NAME, or "
              "ORG/NAME/FILE.gguf) in the local Hugging Face cache (default: the embedded SmolLM2-135M-Instruct)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flint", description="Flint: an LLM inference server for JAX.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--model", default=None, help=MODEL_HELP)
    add_serve_arguments(serve)
    generate = commands.add_parser("generate", help="stream a completion of one prompt to the terminal")
    generate.add_argument("prompt", help="the prompt text")
    generate.add_argument("--chat", action="store_true", help="wrap the prompt as a user turn in the model's chat template")
    generate.add_argument("--max-tokens", type=int, default=256, help="most tokens to generate (default: %(default)s)")
    generate.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default: %(default)s)")
    generate.add_argument("--seed", type=int, default=None, help="seed for temperature sampling")
    generate.add_argument("--model", default=None, help=MODEL_HELP)
    generate.add_argument("--max-model-len", type=int, default=2048, help="longest sequence (default: %(default)s)")
    add_download_argument(generate)
    add_device_arguments(generate)
    add_compilation_cache_arguments(generate, "the data directory ($FLINT_DATA_DIR, else $XDG_DATA_HOME/flint, "
                                              "else ~/.local/share/flint)")
    add_chat_parser(commands, MODEL_HELP)
    return parser


def generate(args: argparse.Namespace) -> int:
    from api.server.progress import first_token_spinner
    from engine.loader.source import ModelNotFoundError

    with first_token_spinner() as spinner:  # on a terminal: a spinner on stderr until the first token
        try:
            engine = load_local_engine(args, progress=spinner)
        except (ModelNotFoundError, ValueError) as error:
            spinner.stop()
            print(f"flint: {error}", file=sys.stderr)
            return EXIT_BAD_ARGUMENTS
        stream_completion(engine, args, spinner)
    print()
    return 0


def stream_completion(engine: Engine, args: argparse.Namespace, spinner: FirstTokenSpinner) -> None:
    """`args.prompt`'s completion printed to stdout as it is generated, through `flint`'s
    Python API (flint/llm.py)."""
    from flint import LLM, SamplingParams

    llm = LLM.from_engine(engine)
    if args.chat:  # the prompt as a user turn: its own text is plain text, only the template's markers special
        prompt = llm.tokenizer.encode_chat(llm.tokenizer.render_chat_prompt([{"role": "user", "content": args.prompt}]))
    else:
        prompt = args.prompt
    printed = 0
    for result in llm.stream(prompt, SamplingParams(temperature=args.temperature, seed=args.seed,
                                                    max_tokens=args.max_tokens)):
        text = result.outputs[0].text
        if result.outputs[0].token_ids:
            spinner.stop()  # gone before the first text: stdout carries the answer alone
        print(text[printed:], end="", flush=True)
        printed = len(text)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return {"serve": serve, "generate": generate, "chat": chat}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
