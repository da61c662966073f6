"""POST /v1/tokenize and /v1/detokenize: the served model's tokenizer and chat template."""

from __future__ import annotations

from litestar import Request, post
from litestar.datastructures import State

from api.state import ServerState
from api.tokenization import parse_detokenize_request, parse_tokenize_request, tokenize, token_strs
from api.validation import read_json_body
from generated.flint import DetokenizeResponse, TokenizeResponse


@post("/tokenize", status_code=200)
async def tokenize_prompt(request: Request, state: State) -> TokenizeResponse:
    server: ServerState = state.server
    body = parse_tokenize_request(await read_json_body(request))
    server.require_model(body.model)
    ids = tokenize(server.tokenizer, body)
    return TokenizeResponse(count=len(ids), max_model_len=server.max_model_len, tokens=ids,
                            token_strs=token_strs(server.tokenizer, ids) if body.return_token_strs else None)


@post("/detokenize", status_code=200)
async def detokenize(request: Request, state: State) -> DetokenizeResponse:
    server: ServerState = state.server
    body = parse_detokenize_request(await read_json_body(request), server.tokenizer.vocab_size)
    server.require_model(body.model)
    return DetokenizeResponse(prompt=server.tokenizer.decode(body.tokens))
