"""Structured outputs and tool calls on the live SmolLM2 server, driven by the `openai` SDK and
LangChain exactly as applications drive them."""

from __future__ import annotations

import enum
import json
from typing import Annotated

import jsonschema
import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

MODEL_ID = "SmolLM2-135M-Instruct"
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"timezone": {"type": "string", "maxLength": 30}},
        "required": ["timezone"], "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
TOOLS = [{"type": "function", "function": {"name": name, "description": description, "parameters": SCHEMAS[name],
                                           "strict": True}}
         for name, description in (("get_weather", "The current weather in a city"),
                                   ("get_time", "The current time in a timezone"))]
ASK = [{"role": "user", "content": "What is the weather in Paris, and what time is it in Tokyo?"}]


class Address(BaseModel):
    street: str = Field(max_length=40)
    city: str = Field(max_length=30)


class Person(BaseModel):  # nested objects
    name: str = Field(max_length=30)
    age: int
    address: Address


class Mood(enum.Enum):
    HAPPY = "happy"
    SAD = "sad"
    CALM = "calm"


class Review(BaseModel):  # enums
    mood: Mood
    stars: int = Field(ge=1, le=5)


class ShoppingList(BaseModel):  # arrays (of bounded strings: the reply must end within its tokens)
    shop: str = Field(max_length=30)
    items: list[Annotated[str, Field(max_length=30)]] = Field(min_length=1, max_length=5)
    quantities: list[int] = Field(max_length=5)


@pytest.mark.parametrize("model, question", [
    (Person, "Invent a person who lives in Rome."),
    (Review, "How did the reviewer feel about a quiet, pleasant hotel?"),
    (ShoppingList, "Write a short shopping list for a picnic."),
])
def test_parse_returns_a_model_instance(sdk, model, question):
    reply = sdk.chat.completions.parse(model=MODEL_ID, messages=[{"role": "user", "content": question}],
                                       response_format=model, seed=11, temperature=0.7, max_completion_tokens=300)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, model)
    assert message.parsed == model.model_validate_json(message.content)


def calls_of(reply) -> list[tuple[str, str]]:
    """(name, arguments) of each call of the first choice, arguments checked against their schema."""
    calls = reply.choices[0].message.tool_calls
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    return [(call.function.name, call.function.arguments) for call in calls]


def test_required_tool_calls_validate_and_stream_identically(sdk):
    fields = dict(model=MODEL_ID, messages=ASK, tools=TOOLS, tool_choice="required", seed=5, temperature=1.0,
                  max_completion_tokens=200)
    whole = sdk.chat.completions.create(**fields)
    assert whole.choices[0].finish_reason == "tool_calls"
    calls = calls_of(whole)
    assert calls
    streamed: dict[int, list[str]] = {}
    for chunk in sdk.chat.completions.create(stream=True, **fields):
        for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            name, arguments = streamed.setdefault(piece.index, ["", ""])
            streamed[piece.index] = [name + (piece.function.name or ""), arguments + (piece.function.arguments or "")]
    assert [tuple(streamed[index]) for index in sorted(streamed)] == calls


def test_parallel_tool_calls_with_two_tools(sdk):
    fields = dict(model=MODEL_ID, messages=ASK, tools=TOOLS, tool_choice="required", n=5, seed=3, temperature=1.0,
                  max_completion_tokens=200)
    parallel = sdk.chat.completions.create(parallel_tool_calls=True, **fields)
    counts = [len(choice.message.tool_calls) for choice in parallel.choices]
    assert max(counts) >= 2, counts  # some answers call both tools
    single = sdk.chat.completions.create(parallel_tool_calls=False, **fields)
    assert all(len(choice.message.tool_calls) == 1 for choice in single.choices)


def test_a_named_tool_is_the_one_called(sdk):
    # One call (its arguments' string bounded): with parallel calls the model may call the
    # tool again and again until max_completion_tokens cuts the last one short.
    reply = sdk.chat.completions.create(model=MODEL_ID, messages=ASK, tools=TOOLS, seed=1, max_completion_tokens=120,
                                        tool_choice={"type": "function", "function": {"name": "get_time"}},
                                        parallel_tool_calls=False)
    assert reply.choices[0].finish_reason == "tool_calls"
    assert [name for name, _ in calls_of(reply)] == ["get_time"]


@tool
def get_weather(city: str, unit: str) -> str:
    """The current weather in a city, in celsius or fahrenheit."""
    return f"Sunny in {city}"


class Forecast(BaseModel):
    city: str = Field(max_length=30)
    sunny: bool
    temperature: int = Field(ge=-50, le=60)


@pytest.fixture(scope="module")
def langchain_model(live_server) -> ChatOpenAI:
    return ChatOpenAI(base_url=f"{live_server}/v1", api_key="not-needed", model=MODEL_ID, temperature=0.7,
                      max_tokens=200, seed=4, max_retries=0)


def test_langchain_bind_tools_gives_tool_calls(langchain_model):
    message = langchain_model.bind_tools([get_weather], tool_choice="required").invoke("Weather in Oslo?")
    assert message.tool_calls and message.tool_calls[0]["name"] == "get_weather"
    assert set(message.tool_calls[0]["args"]) == {"city", "unit"}
    assert get_weather.invoke(message.tool_calls[0]["args"]).startswith("Sunny in")


def test_langchain_structured_output_gives_a_model_instance(langchain_model):
    forecast = langchain_model.with_structured_output(Forecast).invoke("Forecast for Madrid tomorrow?")
    assert isinstance(forecast, Forecast)
