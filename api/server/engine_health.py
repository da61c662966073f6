"""How a loaded engine serves, beyond the server's phase: for /health's body and /metrics.

Two things leave a server that answers correctly but slower than it should, and used to
show only in its log: token buckets that a failed background compile left uncompiled (steps
that fit them are padded into a larger bucket, for good), and attention that fell back from
the kernel `auto` chose to the jnp reference (engine/device/attention). A GGUF file's
tensors served as int8 rather than their own blocks (no kernel for their type) are a third."""

from __future__ import annotations

from dataclasses import dataclass

from engine.device.attention import AttentionChoice
from engine.engine import Engine
from engine.loader.gguf_blocks import WeightFormats


@dataclass
class BackgroundCompile:
    """The compile of the buckets start-up left (api/server/lifecycle.py runs it in a thread)."""

    running: bool = False
    error: str | None = None  # why it failed, as "Type: message"

    def failed(self, error: BaseException) -> None:
        self.error = f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class EngineHealth:
    """One reading, taken when /health or /metrics is asked."""

    buckets: tuple[int, ...]  # every token bucket of the engine, ascending
    missing: tuple[int, ...]  # those not compiled
    compiling: bool
    compile_error: str | None
    attention: AttentionChoice
    quantization: str  # the layers' (EngineConfig.quantization, resolved)
    formats: WeightFormats | None  # a GGUF file's projections as read (engine/loader/gguf_blocks.py)

    @property
    def compiled(self) -> tuple[int, ...]:
        return tuple(bucket for bucket in self.buckets if bucket not in self.missing)


def engine_health(engine: Engine, background: BackgroundCompile) -> EngineHealth:
    runner = engine.runner
    return EngineHealth(runner.config.token_buckets, runner.remaining_buckets(), background.running,
                        background.error, runner.attention_choice, engine.config.quantization, engine.weight_formats)
