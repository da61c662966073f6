"""The `flint` command."""

from __future__ import annotations

import argparse
import sys

from api.settings import Settings


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flint", description="Flint: an LLM inference server for JAX.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the HTTP API")
    serve.add_argument("--host", default=Settings.host, help="address to bind (default: %(default)s)")
    serve.add_argument("--port", type=int, default=Settings.port, help="port to bind (default: %(default)s)")
    serve.add_argument("--model", default=None,
                       help="a .gguf file or a Hugging Face directory (default: the embedded SmolLM2-135M-Instruct)")
    return parser


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from api.app import create_app
    from engine.loader.source import ModelNotFoundError

    settings = Settings(host=args.host, port=args.port, model=args.model)
    try:
        app = create_app(settings)
    except ModelNotFoundError as error:
        print(f"flint: {error}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=settings.host, port=settings.port)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return {"serve": serve}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
