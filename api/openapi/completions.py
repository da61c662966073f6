"""The served contract's /v1/completions and /serverless/v1/completions (api/openapi/contract.py).

Three spec documents each describe part of these operations: Fireworks' request and
answer, Friendli Container's request and answer, and the Friendli serverless fields,
answers and events. Flint serves them as api/completions says, and so the contract:

- The request body (`FlintCompletionsBody`) accepts the fields of every model
  api/completions/body.py merges, each with any of the types its dialects give it, and no
  other field; it needs a `prompt` or `tokens`. It is built from body.MODELS, so the
  contract and the parser cannot list different fields.
- /v1/completions answers Fireworks' response, whose choice also carries Friendli's `seed`
  and `tokens` and, when asked, Flint's `logits` and `reasoning_content` (api/completions/
  render.py); Fireworks' closed objects are widened by exactly those fields. With `echo`,
  the first prompt token's logprob is null, which Fireworks' logprobs do not allow.
- /serverless/v1/completions answers the serverless document's own response and events.
"""

from __future__ import annotations

import copy
from typing import Any

import pydantic

from api.completions import body
from api.openapi.specs import Specs, rewrite_refs

FIREWORKS = "fireworks-completions"
FRIENDLI = "friendli-container-completions"
SERVERLESS = "friendli-serverless-completions"
SCHEMAS = "#/components/schemas/"

FRIENDLI_CHOICE_FIELDS = ("seed", "tokens")  # a whole answer's choice always carries them
# What Flint adds to a choice, when asked (api/completions/render.py and reasoning.py).
FLINT_CHOICE_FIELDS = {
    "logits": {"type": "array", "items": {"type": "number"},
               "description": "With `include_output_logits`: each generated token's raw model logit."},
    "reasoning_content": {"type": ["string", "null"],
                          "description": "When thinking is split off the text: the model's reasoning."},
}
FLINT_USAGE_FIELDS = {
    "completion_tokens_details": {
        "type": "object", "required": ["reasoning_tokens"],
        "properties": {"reasoning_tokens": {"type": "integer", "description": "Tokens of thinking."}},
        "description": "When thinking is split off the text: how many completion tokens were thinking."},
}


def completions_paths(specs: Specs) -> tuple[dict[str, Any], dict[str, Any]]:
    """(paths, the schemas they need beside the specs' own)."""
    logprobs = {specs.ref(FIREWORKS, "LogProbs"): SCHEMAS + "FlintLogProbs",
                specs.ref(FIREWORKS, "NewLogProbs"): SCHEMAS + "FlintNewLogProbs"}
    choice = widened(specs.schema(FIREWORKS, "Choice"), FLINT_CHOICE_FIELDS, friendli_choice_fields(specs))
    stream_choice = widened(specs.schema(FIREWORKS, "CompletionResponseStreamChoice"), FLINT_CHOICE_FIELDS)
    schemas = {
        "FlintCompletionsBody": request_body(specs),
        "FlintCompletionChoice": friendli_fields_required(rewrite_refs(choice, logprobs)),
        "FlintCompletionStreamChoice": rewrite_refs(stream_choice, logprobs),
        "FlintCompletionUsage": widened(specs.schema(FIREWORKS, "UsageInfo"), FLINT_USAGE_FIELDS),
        **first_token_logprobs(specs),
    }
    targets = {specs.ref(FIREWORKS, "Choice"): SCHEMAS + "FlintCompletionChoice",
               specs.ref(FIREWORKS, "CompletionResponseStreamChoice"): SCHEMAS + "FlintCompletionStreamChoice",
               specs.ref(FIREWORKS, "UsageInfo"): SCHEMAS + "FlintCompletionUsage"}
    for name in ("CompletionResponse", "CompletionStreamResponse"):
        schemas["Flint" + name] = rewrite_refs(specs.schema(FIREWORKS, name), targets)
    paths = {"/v1/completions": {"post": completions_operation(specs)},
             "/serverless/v1/completions": {"post": serverless_operation(specs)}}
    return paths, schemas


def completions_operation(specs: Specs) -> dict[str, Any]:
    answer = {"application/json": {"schema": {"$ref": SCHEMAS + "FlintCompletionResponse"}},
              "text/event-stream": {"schema": {"$ref": SCHEMAS + "FlintCompletionStreamResponse"}}}
    return {
        "tags": ["completions"], "operationId": "createCompletion", "summary": "Create a text completion",
        "description": "Continues a prompt (text, texts, token ids or Friendli's `tokens`) in the Fireworks "
                       "and Friendli Container dialects, whose request fields may be mixed. With "
                       "`stream: true` the answer is an SSE stream of chunks ending with `data: [DONE]`.",
        "requestBody": json_body(),
        "responses": {"200": {"description": "The completion, or a stream of chunks.", "content": answer}},
    }


def serverless_operation(specs: Specs) -> dict[str, Any]:
    """The serverless document's operation, taking the whole body Flint accepts."""
    operation = copy.deepcopy(specs.documents[SERVERLESS]["paths"]["/v1/completions"]["post"])
    operation.pop("security", None)
    operation["requestBody"] = json_body()
    operation["description"] = ("The /v1/completions request, answered in the Friendli serverless shapes: "
                                "one JSON object, or with `stream: true` `token_sampled` events and then "
                                "one `complete` event.")
    return operation


def first_token_logprobs(specs: Specs) -> dict[str, Any]:
    """Fireworks' logprobs, whose first echoed prompt token may have a null logprob (and no
    alternatives): it has no context, and OpenAI and vLLM report it so (api/completions/
    logprobs.py), where Fireworks' lists hold only numbers."""
    legacy = specs.schema(FIREWORKS, "LogProbs")
    fields = legacy["properties"]
    fields["token_logprobs"]["items"] = {"type": ["number", "null"]}
    tops = fields["top_logprobs"]["anyOf"][0]  # the list; the other branch is null
    tops["items"] = {"anyOf": [tops["items"], {"type": "null"}]}
    content = specs.schema(FIREWORKS, "NewLogProbsContent")
    content["properties"]["logprob"]["type"] = ["number", "null"]
    entries = {specs.ref(FIREWORKS, "NewLogProbsContent"): SCHEMAS + "FlintNewLogProbsContent"}
    return {"FlintLogProbs": legacy, "FlintNewLogProbsContent": content,
            "FlintNewLogProbs": rewrite_refs(specs.schema(FIREWORKS, "NewLogProbs"), entries)}


def json_body() -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {"$ref": SCHEMAS + "FlintCompletionsBody"}}}}


def request_body(specs: Specs) -> dict[str, Any]:
    """The union of body.MODELS' fields (api/core/validation.py merged_model), refusing others."""
    properties: dict[str, list[Any]] = {}
    for model in body.MODELS:
        for name, schema in model_schema(specs, model).get("properties", {}).items():
            variants = properties.setdefault(name, [])
            if schema not in variants:
                variants.append(schema)
    given = lambda field: {"required": [field], "properties": {field: {"not": {"type": "null"}}}}
    return {
        "type": "object", "title": "FlintCompletionsBody", "additionalProperties": False,
        "description": "The fields of the Fireworks and Friendli Container completion requests, the Friendli "
                       "serverless extensions and OpenAI's legacy `best_of` and `suffix`, each of any type a "
                       "dialect gives it. A `prompt` or `tokens` is required.",
        "properties": {name: variants[0] if len(variants) == 1 else {"anyOf": variants}
                       for name, variants in properties.items()},
        "anyOf": [given("prompt"), given("tokens")],
    }


def model_schema(specs: Specs, model: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The spec schema a generated model comes from; a model of Flint's own describes itself."""
    module = model.__module__
    if module.startswith("generated."):
        return specs.schema(module.removeprefix("generated.").replace("_", "-"), model.__name__)
    return model.model_json_schema()


def friendli_choice_fields(specs: Specs) -> dict[str, Any]:
    fields = specs.schema(FRIENDLI, "CompletionsChoice")["properties"]
    return {name: fields[name] for name in FRIENDLI_CHOICE_FIELDS}


def friendli_fields_required(choice: dict[str, Any]) -> dict[str, Any]:
    """Every whole answer's choice has them (the seed used, the ids generated)."""
    choice["required"] = [*choice.get("required", []), *FRIENDLI_CHOICE_FIELDS]
    return choice


def widened(schema: dict[str, Any], *extra: dict[str, Any]) -> dict[str, Any]:
    """A closed object schema that also has the `extra` properties."""
    for fields in extra:
        schema["properties"] = {**schema["properties"], **fields}
    return schema
