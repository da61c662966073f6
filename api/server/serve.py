"""`flint serve`: settings from the command line, and uvicorn with Flint's shutdown rules.

On SIGTERM or Ctrl-C the API turns to 503 "draining" at once; uvicorn stops accepting
connections and gives in-flight requests up to `--shutdown-timeout` seconds to finish; then
the generations still running end with an error (a stream with its dialect's error event, not
a cut connection), what is left is cancelled shortly after, the app's shutdown hook stops the
engine and the process exits 0.
A model that fails to load, or an engine that stops on an error while serving, ends the
process with status 1, so that a supervisor starts it again. Flags that cannot work (a model
that is not there, limits that contradict each other, more devices than JAX sees) end it at
once with status 2, and a port that cannot be bound with status 3: each before the model
loads, with a one-line message.

Compiled programs are kept in `--compilation-cache` (by default under `--data-dir`), so a
restart loads them rather than compiling them again."""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import socket
import sys
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from api.server.cors import add_cors_arguments
from api.server.flag_types import at_least
from api.server.launch import imports_frozen
from api.server.encoders import add_encoder_arguments
from api.server.lora_flags import add_lora_arguments, lora_engine_options
from api.server.multihost import add_multihost_arguments, join_group, run_follower, topology_from_args
from api.server.settings import LOG_FORMATS, MIB, Settings, default_compilation_cache, default_data_dir
from api.server.tenancy_flags import add_tenancy_arguments, tenancy_options
from engine.config import (
    ATTENTIONS,
    AUTO,
    CPU_KERNELS,
    KV_CACHE_DTYPES,
    LAYER_LOOPS,
    QUANTIZATIONS,
    SPECULATIVE,
    EngineConfig,
    default_num_pages,
)

if TYPE_CHECKING:  # the app and its engine (and JAX) load only when `serve` runs
    from api.server.lifecycle import EngineLifecycle

DTYPES = (AUTO, "float32", "bfloat16", "float16")
EXIT_FAILED = 1  # the model could not load, or the engine stopped on an error
EXIT_BAD_ARGUMENTS = 2
EXIT_STARTUP_FAILED = 3  # the server could not start (the port is taken, ...)
# Seconds between the end of --shutdown-timeout, when the generations still running are
# broken off, and uvicorn cancelling what is left: time for their error events to go out.
BREAK_OFF_GRACE = 2.0


def add_download_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--download", action="store_true",
                        help="fetch a --model repo id that is not in the Hugging Face cache (default: refuse it; "
                             "nothing is ever downloaded without this flag)")


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    server, engine = Settings(), EngineConfig()
    add_download_argument(serve)
    serve.add_argument("--host", default=server.host, help="address to bind (default: %(default)s)")
    serve.add_argument("--port", type=int, default=server.port, help="port to bind (default: %(default)s)")
    add_tenancy_arguments(serve)
    add_cors_arguments(serve)
    serve.add_argument("--max-waiting", type=at_least(0), default=server.max_waiting,
                       help="queued generation requests before new ones get 429 (default: %(default)s)")
    serve.add_argument("--shutdown-timeout", type=at_least(0, float), default=server.shutdown_timeout,
                       help="seconds in-flight requests may take to finish after SIGTERM; generations still "
                            "running then end with an error (default: %(default)s)")
    serve.add_argument("--max-body-bytes", type=at_least(1), default=server.max_body_bytes,
                       help=f"largest request body; larger ones get 413 "
                            f"(default: %(default)s, {server.max_body_bytes // MIB} MiB)")
    serve.add_argument("--max-model-len", type=at_least(2), default=engine.max_model_len,
                       help="longest sequence, prompt and output; capped at the model's context length "
                            "(default: %(default)s)")
    serve.add_argument("--max-num-seqs", type=at_least(1), default=engine.max_num_seqs,
                       help="most requests computed at once (default: %(default)s)")
    serve.add_argument("--max-num-batched-tokens", type=at_least(1), default=engine.max_num_batched_tokens,
                       help="most tokens per engine step; one compiled shape per power of two up to it "
                            "(default: %(default)s)")
    serve.add_argument("--num-pages", type=at_least(2), default=None,
                       help=f"KV-cache pages of {engine.page_size} tokens (default: room for --max-num-seqs "
                            "sequences of an eighth of --max-model-len each, and for one full-length one)")
    add_device_arguments(serve)
    serve.add_argument("--quantization", default=AUTO, choices=(AUTO, *QUANTIZATIONS),
                       help="weights of the layers: gguf (a GGUF file's own blocks, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K "
                            "and Q6_K, read in place; other types as int8), int8 (a quarter of float32's bytes, "
                            "widened as they are read), fp8, or none (the compute dtype); auto: gguf on CPU for "
                            "GGUF files, none otherwise (default: %(default)s)")
    serve.add_argument("--no-prefix-caching", action="store_true",
                       help="do not reuse KV pages of shared prompt prefixes")
    serve.add_argument("--speculative", default=engine.speculative, choices=SPECULATIVE,
                       help="draft tokens for every request; ngram: look the latest tokens up earlier in "
                            "the context and propose what followed (predicted outputs are always used; "
                            "outputs never change) (default: %(default)s)")
    serve.add_argument("--num-speculative-tokens", metavar="K", type=at_least(0),
                       default=engine.num_speculative_tokens,
                       help="most draft tokens (n-gram or predicted) checked per sequence and step "
                            "(default: %(default)s)")
    serve.add_argument("--data-dir", default=server.data_dir,
                       help="where stored chat completions and responses are kept, in the SQLite file "
                            "flint.db, and compiled programs (default: $FLINT_DATA_DIR, else "
                            "$XDG_DATA_HOME/flint, else ~/.local/share/flint; now %(default)s)")
    add_compilation_cache_arguments(serve, "--data-dir")
    serve.add_argument("--store-url", default=os.environ.get("FLINT_STORE_URL") or None,
                       help="a database URL replacing the SQLite file, e.g. "
                            "postgresql+asyncpg://user:password@host:5432/flint (default: $FLINT_STORE_URL)")
    serve.add_argument("--allow-special-tokens-in-content", action="store_true",
                       help="parse special-token text inside chat message content as control tokens (by "
                            "default it is plain text, so no message can forge a role marker)")
    serve.add_argument("--log-format", default=server.log_format, choices=LOG_FORMATS,
                       help="log lines as text, or as one JSON object a line (timestamp, level, logger, "
                            "message, request_id), with one access line per request (default: %(default)s)")
    add_lora_arguments(serve)
    serve.add_argument("--allow-runtime-weights", action="store_true",
                       help="serve POST /v1/update_weights (new weights from a checkpoint folder on this server), "
                            "/sleep, /wake_up and /reset_prefix_cache, for a training loop: any API key may call "
                            "them, and they pause every request (default: off, a 403)")
    add_encoder_arguments(serve)
    add_multihost_arguments(serve)


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """How the model runs on the devices: the flags `serve` and `generate` share."""
    engine = EngineConfig()
    parser.add_argument("--dtype", default=engine.dtype, choices=DTYPES,
                        help="compute and KV-cache dtype; auto: float32 on CPU (fastest there), bfloat16 on "
                             "GPUs (default: %(default)s)")
    parser.add_argument("--kv-cache-dtype", default=engine.kv_cache_dtype, choices=KV_CACHE_DTYPES,
                        help="the KV cache's dtype; float8_values: keys in bfloat16, values in float8_e4m3fn; "
                             "the float8 ones are read by the reference and native CPU attention only; auto: "
                             "float8_values where the native CPU kernels serve int8 weights (3 bytes a key and "
                             "value, against float32's 8), else --dtype's (default: %(default)s)")
    parser.add_argument("--tensor-parallel-size", "-tp", metavar="N", type=at_least(1),
                        default=engine.mesh_shape[0],
                        help="devices the model is split over, by attention heads, MLP columns and "
                             "vocabulary (default: %(default)s)")
    parser.add_argument("--attention", default=engine.attention, choices=ATTENTIONS,
                        help="attention implementation; auto: the Mosaic GPU kernel on GPUs where it serves "
                             "the model's shape and passes its start-up check, the native CPU kernel where "
                             "--cpu-kernels is native, the jnp reference otherwise (default: %(default)s)")
    parser.add_argument("--layer-loop", default=engine.layer_loop, choices=LAYER_LOOPS,
                        help="how the forward loops over the layers; auto: unrolled on GPUs (whose scan "
                             "copies each layer's weights), a scan elsewhere (default: %(default)s)")
    parser.add_argument("--cpu-kernels", default=engine.cpu_kernels, choices=CPU_KERNELS,
                        help="the native CPU kernels built at install (int8 products, decode attention, an "
                             "int8 head), or the jnp path; auto: native on a one-device CPU where they "
                             "were built (default: %(default)s)")


def add_compilation_cache_arguments(parser: argparse.ArgumentParser, data_dir: str) -> None:
    parser.add_argument("--compilation-cache", metavar="DIR", default=None,
                        help="keep compiled XLA programs in DIR, so that a restart loads them instead of "
                             "compiling them again (default: $JAX_COMPILATION_CACHE_DIR, else "
                             f"compilation-cache in {data_dir})")
    parser.add_argument("--no-compilation-cache", action="store_true",
                        help="compile every program at start-up, and keep none")


def compilation_cache_from_args(args: argparse.Namespace, data_dir: str | None = None) -> str | None:
    """The compilation cache directory the flags name, or None when it is turned off."""
    if args.no_compilation_cache:
        return None
    if args.compilation_cache is not None:
        return args.compilation_cache or None  # --compilation-cache '' turns it off too
    return default_compilation_cache(data_dir or default_data_dir())


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Raises ValueError when the engine flags contradict each other."""
    page_size = EngineConfig.page_size
    num_pages = args.num_pages or default_num_pages(args.max_model_len, args.max_num_seqs, page_size)
    engine = EngineConfig(max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                          max_num_batched_tokens=args.max_num_batched_tokens, num_pages=num_pages,
                          dtype=args.dtype, quantization=args.quantization, kv_cache_dtype=args.kv_cache_dtype,
                          mesh_shape=(args.tensor_parallel_size,), attention=args.attention,
                          layer_loop=args.layer_loop, cpu_kernels=args.cpu_kernels,
                          enable_prefix_caching=not args.no_prefix_caching, speculative=args.speculative,
                          num_speculative_tokens=args.num_speculative_tokens, **lora_engine_options(args),
                          session_ttl=args.session_ttl)
    return Settings(host=args.host, port=args.port, model=args.model, download=args.download, engine=engine,
                    **tenancy_options(args),
                    max_waiting=args.max_waiting, shutdown_timeout=args.shutdown_timeout,
                    max_body_bytes=args.max_body_bytes, data_dir=args.data_dir, store_url=args.store_url,
                    compilation_cache=compilation_cache_from_args(args, args.data_dir),
                    allow_special_tokens_in_content=args.allow_special_tokens_in_content,
                    log_format=args.log_format, topology=topology_from_args(args),
                    follower_timeout=args.follower_timeout, lora_modules=tuple(args.lora),
                    allow_runtime_lora=args.allow_runtime_lora, allow_runtime_weights=args.allow_runtime_weights,
                    allowed_origins=tuple(args.allowed_origins),
                    embedding_models=tuple(args.embedding_model), rerank_models=tuple(args.rerank_model))


def check_tensor_parallel_size(size: int) -> None:
    """Raises ValueError, naming the flag, when JAX sees fewer than `size` devices: a flag to
    correct (status 2, at once), not a load failure for a supervisor to retry (status 1)."""
    if size == 1:  # always possible; leave JAX's backend to start in the loading thread
        return
    import jax  # here: parsing flags and `flint --help` need no JAX

    available = jax.device_count()
    if size > available:
        raise ValueError(f"--tensor-parallel-size {size} needs {size} devices, and JAX sees {available} "
                         f"({jax.default_backend()})")


class FlintServer(uvicorn.Server):
    """uvicorn, told when to drain the API and when the engine failed to load."""

    def __init__(self, config: uvicorn.Config, lifecycle: EngineLifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        self.failed = False  # the engine could not load, or stopped on an error
        lifecycle.on_failure = self.fail

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.lifecycle.drain()
        # As uvicorn's own handler, except that it does not record the signal: uvicorn
        # re-raises recorded signals after shutting down, and a SIGTERM answered by an
        # orderly shutdown should end the process with status 0, not die of the signal.
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    def fail(self, _: BaseException) -> None:
        self.failed = True
        self.should_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn cancels the tasks still running when its graceful timeout is over, which
        # cuts a stream off mid-event. Flint's timeout ends first: the generations still
        # running end with their dialect's error event, and uvicorn (BREAK_OFF_GRACE later)
        # finds their answers complete.
        breaking_off = asyncio.create_task(self._break_off_after(self.lifecycle.settings.shutdown_timeout))
        try:
            await super().shutdown(sockets)
        finally:
            breaking_off.cancel()

    async def _break_off_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.lifecycle.cut_off_generations()

    def exit_status(self) -> int:
        if not self.started:
            return EXIT_STARTUP_FAILED
        return EXIT_FAILED if self.failed else 0


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before anything else starts: a port already in use ends
    `flint serve` at once with a clear message, rather than after loading the model."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def serve(args: argparse.Namespace) -> int:
    # What the imports make (modules, classes, functions) lives as long as the process: out of
    # the collector's way, a full collection (the one start-up runs to free what loading left,
    # and each one while serving) walks only what came after (api/server/launch.py).
    with imports_frozen():
        from api.server.app import create_app
        from api.server.lifecycle import load_engine
        from api.server.logs import uvicorn_logging
        from api.server.progress import startup_display
        from engine.loader.source import ModelNotFoundError, resolve_model

    try:
        settings = settings_from_args(args)
        if settings.topology is not None:  # before anything starts JAX's backend
            join_group(settings.topology, settings.follower_timeout)
        check_tensor_parallel_size(settings.engine.mesh_shape[0])
        if settings.topology is not None and not settings.topology.is_leader:
            # A model that is not there: status 2 at once, as for the leader.
            model = resolve_model(settings.model, settings.download)
            # As the leader's create_app serves it: every process needs the same shapes.
            return serve_as_follower(settings.served(model.context_length))
        display = startup_display(settings.log_format)  # progress lines, on a terminal with text logs
        app = create_app(settings, functools.partial(load_engine, display=display))
    except (ModelNotFoundError, ValueError) as error:
        print(f"flint: {error}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    try:
        sock = listening_socket(settings.host, settings.port)
    except OSError as error:
        print(f"flint: cannot listen on {settings.host}:{settings.port}: {error.strerror or error}", file=sys.stderr)
        return EXIT_STARTUP_FAILED
    config = uvicorn.Config(app, host=settings.host, port=settings.port,
                            timeout_graceful_shutdown=settings.shutdown_timeout + BREAK_OFF_GRACE,
                            **uvicorn_logging(settings.log_format))
    server = FlintServer(config, app.state.lifecycle)
    server.run(sockets=[sock])
    status = server.exit_status()
    if app.state.lifecycle.is_loading or app.state.lifecycle.engine_blocked:
        # Stopped while the model compiles, or while a step waits on a follower that stopped
        # answering. Neither can be interrupted, and a thread still inside XLA when the
        # interpreter finalizes aborts the process; leave now.
        if display is not None:  # else its last frame and hidden cursor outlive the process
            display.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def serve_as_follower(settings: Settings) -> int:
    """A follower of a multi-host group: no HTTP, only the model's share and the leader's steps."""
    from api.server.lifecycle import load_engine
    from api.server.logs import logging_config

    logging_config(settings.log_format).configure()
    return run_follower(settings, load_engine)
