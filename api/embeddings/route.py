"""POST /v1/embeddings (OpenAI's), /v1/rerank (Cohere's and Jina's shape, also at /v2/rerank
and /rerank) and /v1/score (vLLM's), served by the encoders `flint serve --embedding-model`
and `--rerank-model` load beside the chat model.

A request's `model` chooses the encoder; a model that cannot serve the route (the chat model,
a reranker asked for embeddings) is a 400 naming `model`, an unknown one a 404. A reranker
scores a pair in one input; an embedder scores it by the cosine of the two texts' vectors,
as vLLM does.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid

import numpy as np
from litestar import Request, post
from litestar.datastructures import State

from api.core.errors import invalid, model_not_found
from api.core.state import ServerState
from api.core.validation import parse_body, read_json_body, require_object
from api.embeddings import body as bodies
from api.embeddings.fields import REGISTRY
from engine.async_encoder import AsyncEncoder
from engine.device.encoder_runner import InputTooLong
from generated.flint import (Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage, RerankDocument,
                             RerankRequest, RerankResponse, RerankResult, RerankUsage, ScoreData, ScoreRequest,
                             ScoreResponse)

ROUTE_TASKS = {"embeddings": ("embed",), "rerank": ("rerank", "embed"), "score": ("rerank", "embed")}


def routes_of(task: str) -> tuple[str, ...]:
    """The routes an encoder of `task` serves: an embedder all three, a reranker two."""
    return tuple(route for route, tasks in ROUTE_TASKS.items() if task in tasks)


def encoder_for(server: ServerState, model: str | None, route: str) -> AsyncEncoder:
    """The served encoder `model` names (or, left out, the only one that serves `route`)."""
    tasks = ROUTE_TASKS[route]
    if model is None:
        fitting = [encoder for encoder in server.encoders.values() if encoder.checkpoint.task in tasks]
        if len(fitting) != 1:
            raise invalid("model", f"name the model: {len(fitting)} served models serve /v1/{route}")
        return fitting[0]
    encoder = server.encoders.get(model)
    if encoder is None:
        if model == server.model.id or (server.adapters is not None and server.adapters.get(model) is not None):
            raise invalid("model", f"`{model}` is a generation model: it does not serve /v1/{route} "
                          "(flint serve --embedding-model or --rerank-model serves one that does)")
        raise model_not_found(model)
    if encoder.checkpoint.task not in tasks:
        raise invalid("model", f"`{model}` is a reranker: it serves /v1/rerank and /v1/score, not /v1/{route}")
    return encoder


def record(server: ServerState, encoder: AsyncEncoder, route: str, tokens: int, started: float) -> None:
    server.metrics.record_encoder_request(model=encoder.id, route=route, tokens=tokens,
                                          latency=time.perf_counter() - started)


async def parsed(request: Request, model_class: type):
    raw = require_object(await read_json_body(request))
    body = await asyncio.to_thread(parse_body, model_class, raw)
    REGISTRY.refuse_within(body)
    return body


async def encoded(encoder: AsyncEncoder, inputs) -> np.ndarray:
    try:
        return await encoder.run(inputs)
    except InputTooLong as error:  # checked in body.py first: this is a bug's guard, named all the same
        raise invalid("input", str(error)) from None


@post("/embeddings", status_code=200)
async def create_embedding(request: Request, state: State) -> EmbeddingResponse:
    server: ServerState = state.server
    started = time.perf_counter()
    body: EmbeddingRequest = await parsed(request, EmbeddingRequest)
    encoder = encoder_for(server, body.model, "embeddings")
    checkpoint = encoder.checkpoint
    if body.dimensions is not None and not checkpoint.allows_dimensions(body.dimensions):
        raise invalid("dimensions", f"`{checkpoint.id}` gives {checkpoint.config.hidden_size} dimensions and was "
                      f"not trained to be cut to {body.dimensions} (Matryoshka)")
    inputs = await asyncio.to_thread(bodies.embedding_inputs, body, checkpoint)
    vectors = cut_to(await encoded(encoder, inputs), body.dimensions)
    num_tokens = sum(len(item.ids) for item in inputs)
    record(server, encoder, "embeddings", num_tokens, started)
    data = [Embedding(object="embedding", index=index, embedding=encoded_vector(vector, body.encoding_format))
            for index, vector in enumerate(vectors)]
    return EmbeddingResponse(object="list", data=data, model=checkpoint.id,
                             usage=EmbeddingUsage(prompt_tokens=num_tokens, total_tokens=num_tokens))


def cut_to(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The first `dimensions` of each vector at unit length again (Matryoshka); as they are without."""
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    cut = vectors[:, :dimensions]
    return cut / np.maximum(np.linalg.norm(cut, axis=1, keepdims=True), 1e-12)


def encoded_vector(vector: np.ndarray, encoding_format: str | None) -> list[float] | str:
    if encoding_format == "base64":  # the float32 bytes, little-endian, as OpenAI's
        return base64.b64encode(np.asarray(vector, "<f4").tobytes()).decode("ascii")
    return vector.astype(np.float64).tolist()


async def relevance(encoder: AsyncEncoder, pairs: list[tuple[str, str]], names: tuple[str, str],
                    limit: int | None = None, per_document: int | None = None) -> tuple[np.ndarray, int]:
    """Each pair's score and the tokens read: a reranker's, or the cosine of an embedder's
    vectors. `names`: the fields of the pairs' first and second texts, for errors."""
    checkpoint = encoder.checkpoint
    if checkpoint.task == "rerank":
        inputs = await asyncio.to_thread(bodies.pair_inputs, pairs, checkpoint, names[1], limit, per_document)
        return await encoded(encoder, inputs), sum(len(item.ids) for item in inputs)
    firsts = list(dict.fromkeys(first for first, _ in pairs))
    queries = await asyncio.to_thread(bodies.text_inputs, firsts, checkpoint, names[0], limit)
    documents = await asyncio.to_thread(bodies.text_inputs, [second for _, second in pairs], checkpoint, names[1],
                                        per_document or limit, "first" if per_document else "last")
    vectors = await encoded(encoder, queries + documents)
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    place = {text: index for index, text in enumerate(firsts)}
    scores = np.array([unit[place[first]] @ unit[len(firsts) + index] for index, (first, _) in enumerate(pairs)])
    return scores, sum(len(item.ids) for item in queries + documents)


@post(["/rerank"], status_code=200)
async def rerank(request: Request, state: State) -> RerankResponse:
    server: ServerState = state.server
    started = time.perf_counter()
    body: RerankRequest = await parsed(request, RerankRequest)
    encoder = encoder_for(server, body.model, "rerank")
    if body.top_n is not None and body.top_n <= 0:
        raise invalid("top_n", f"top_n must be at least 1; got {body.top_n}")
    documents = bodies.document_texts(body)
    scores, num_tokens = await relevance(encoder, [(body.query, document) for document in documents],
                                         ("query", "documents"), None, body.max_tokens_per_doc)
    record(server, encoder, "rerank", num_tokens, started)
    order = sorted(range(len(documents)), key=lambda index: -scores[index])[: body.top_n or len(documents)]
    keep = body.return_documents is not False
    results = [RerankResult(index=index, relevance_score=float(scores[index]),
                            document=RerankDocument(text=documents[index]) if keep else None) for index in order]
    return RerankResponse(id=f"rerank-{uuid.uuid4().hex}", model=encoder.id, results=results,
                          usage=RerankUsage(total_tokens=num_tokens))


@post("/score", status_code=200)
async def score(request: Request, state: State) -> ScoreResponse:
    server: ServerState = state.server
    started = time.perf_counter()
    body: ScoreRequest = await parsed(request, ScoreRequest)
    encoder = encoder_for(server, body.model, "score")
    limit = bodies.truncation(body.truncate_prompt_tokens, encoder.checkpoint)
    pairs = bodies.score_pairs(body)
    scores, num_tokens = await relevance(encoder, pairs, ("text_1", "text_2"), limit)
    record(server, encoder, "score", num_tokens, started)
    return ScoreResponse(id=f"score-{uuid.uuid4().hex}", object="list", created=int(time.time()), model=encoder.id,
                         data=[ScoreData(index=index, object="score", score=float(value))
                               for index, value in enumerate(scores)],
                         usage=EmbeddingUsage(prompt_tokens=num_tokens, total_tokens=num_tokens))


HANDLERS = [create_embedding, rerank, score]
