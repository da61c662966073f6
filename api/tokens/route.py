"""The tokenizer routes, in vLLM's shapes: POST /tokenize and /detokenize, GET /tokenizer_info.

Served under /v1 (and /inference/v1) and at the root, where vLLM serves them and where
lm-eval-harness's remote tokenizer (`tokenizer_backend=remote`) looks for them."""

from __future__ import annotations

import asyncio

from litestar import Request, get, post
from litestar.datastructures import State

from api.core.state import ServerState
from api.core.validation import read_json_body
from api.tokens import fields
from api.tokens.body import parse_detokenize, parse_tokenize, token_strs, tokenize
from generated.flint import DetokenizeResponse, TokenizeResponse, TokenizerInfoResponse

REGISTRY = fields.REGISTRY  # the routes' field registry (api/server/app.py checks them all)
# The kind of tokenizer every model is served through, by transformers' name for it.
TOKENIZER_CLASS = "PreTrainedTokenizerFast"


@post("/tokenize", status_code=200)
async def tokenize_prompt(request: Request, state: State) -> TokenizeResponse:
    server: ServerState = state.server
    body = await asyncio.to_thread(parse_tokenize, await read_json_body(request))
    server.require_model(body.model)
    ids = await tokenize(server, body)
    return TokenizeResponse(count=len(ids), max_model_len=server.max_model_len, tokens=ids,
                            token_strs=token_strs(server.tokenizer, ids) if body.return_token_strs else None)


@post("/detokenize", status_code=200)
async def detokenize(request: Request, state: State) -> DetokenizeResponse:
    server: ServerState = state.server
    body = await asyncio.to_thread(parse_detokenize, await read_json_body(request), server.tokenizer.vocab_size,
                                   server.max_model_len)
    server.require_model(body.model)
    return DetokenizeResponse(prompt=await asyncio.to_thread(server.tokenizer.decode, body.tokens))


@get("/tokenizer_info", sync_to_thread=False)
def tokenizer_info(state: State) -> TokenizerInfoResponse:
    server: ServerState = state.server
    tokenizer = server.tokenizer
    token = lambda token_id: None if token_id is None else tokenizer.decode([token_id])
    eos = tokenizer.eos_token_ids[0] if tokenizer.eos_token_ids else None
    return TokenizerInfoResponse(
        tokenizer_class=TOKENIZER_CLASS, bos_token=token(tokenizer.bos_token_id), eos_token=token(eos),
        pad_token=token(tokenizer.pad_token_id), add_bos_token=tokenizer.add_bos_token,
        chat_template=tokenizer.chat_template, model_max_length=server.max_model_len,
        vocab_size=tokenizer.vocab_size)


HANDLERS = [tokenize_prompt, detokenize, tokenizer_info]
