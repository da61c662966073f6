"""GET /health: 200 while serving, 503 while starting, draining or failed; once the engine
has loaded, the body also says how it serves (api/server/engine_health.py)."""

from __future__ import annotations

from litestar import Response, get
from litestar.datastructures import State

from api.server.engine_health import EngineHealth
from generated.flint import HealthAttention, HealthBuckets, HealthResponse, HealthWeightFallback, HealthWeights


@get("/health", sync_to_thread=False)
def health(state: State) -> Response[dict]:
    phase = state.server.phase
    engine = state.lifecycle.engine_health()
    details = {} if engine is None else {"buckets": buckets_body(engine), "attention": attention_body(engine),
                                         "weights": weights_body(engine)}
    # Unset, not null: before the engine has loaded there is nothing to say of it.
    body = HealthResponse(status=phase, **details).model_dump(mode="json", exclude_unset=True)
    return Response(body, status_code=200 if phase == "ok" else 503)


def buckets_body(engine: EngineHealth) -> HealthBuckets:
    return HealthBuckets(compiled=list(engine.compiled), missing=list(engine.missing), compiling=engine.compiling,
                         error=engine.compile_error)


def attention_body(engine: EngineHealth) -> HealthAttention:
    choice = engine.attention
    return HealthAttention(requested=choice.requested, in_use=choice.in_use, fell_back=choice.fallback is not None,
                           reason=choice.fallback)


def weights_body(engine: EngineHealth) -> HealthWeights:
    formats = engine.formats
    kept = {} if formats is None else dict(formats.kept)
    fell_back = [] if formats is None else [HealthWeightFallback(tensor=tensor, reason=reason)
                                           for tensor, reason in formats.fell_back.items()]
    return HealthWeights(quantization=engine.quantization, kept=kept, fell_back=fell_back)
