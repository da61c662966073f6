"""The tool-call formats: each one's grammar accepts exactly its calls, its parser reads them
back whole and streamed, and the chat template decides which format a model gets."""

from __future__ import annotations

import pytest

from api.core.tool_format import DEFAULT, HERMES, LLAMA3_JSON, MISTRAL, template_format
from api.core.tool_grammar import tool_grammar
from api.core.tool_parser import ArgumentsDelta, CallStart, ContentDelta, ToolCallStream, parse_answer
from api.core.tool_prompt import tool_conversation
from api.core.tools import Tool, ToolChoice
from engine.text.grammar import Grammar, GrammarCompiler

WEATHER = Tool("get_weather", "Weather", {"type": "object", "properties": {"city": {"type": "string"}},
                                           "required": ["city"]}, strict=True)
CLOCK = Tool("get_time", "Time", {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}},
                                  "required": ["zone"]}, strict=True)
SQL = Tool("sql", custom=True, input_grammar=Grammar("lark", 'start: "SELECT " /[a-z]+/'))
CALLS = [("get_weather", '{"city": "Pa}ris \\"x\\""}', False), ("get_time", '{"zone": "cet"}', False)]
FORMATS = [HERMES, LLAMA3_JSON, MISTRAL]


@pytest.fixture(scope="module")
def compiler(smollm2_tokenizer):
    return GrammarCompiler(smollm2_tokenizer, smollm2_tokenizer.vocab_size, smollm2_tokenizer.eos_token_ids)


def accepted(compiler, tokenizer, grammar: Grammar, text: str) -> bool:
    """Whether `text` is a complete answer under `grammar`."""
    matcher = compiler.matcher(grammar)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return matcher.try_consume_tokens(ids) == len(ids) and matcher.is_accepting()


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_each_format_constrains_names_arguments_and_count(compiler, smollm2_tokenizer, fmt):
    both = fmt.calls_text(CALLS)
    required = tool_grammar([WEATHER, CLOCK], ToolChoice("required"), fmt)
    assert accepted(compiler, smollm2_tokenizer, required, both)
    assert not accepted(compiler, smollm2_tokenizer, required, "Hello")
    assert not accepted(compiler, smollm2_tokenizer, required, fmt.calls_text([("get_time", '{"zone": "pst"}', False)]))
    assert not accepted(compiler, smollm2_tokenizer, required, fmt.calls_text([("get_date", "{}", False)]))
    single = tool_grammar([WEATHER, CLOCK], ToolChoice("required", parallel=False), fmt)
    assert not accepted(compiler, smollm2_tokenizer, single, both)
    auto = tool_grammar([WEATHER, CLOCK], ToolChoice("auto"), fmt)
    assert accepted(compiler, smollm2_tokenizer, auto, "Just text.")
    assert accepted(compiler, smollm2_tokenizer, auto, both)


def test_auto_allows_text_before_the_calls_and_named_narrows_them(compiler, smollm2_tokenizer):
    auto = tool_grammar([WEATHER, CLOCK], ToolChoice("auto"), HERMES)
    assert accepted(compiler, smollm2_tokenizer, auto, "Let me check." + HERMES.calls_text(CALLS[:1]))
    named = tool_grammar([CLOCK], ToolChoice("required", names=("get_time",)), HERMES)
    assert not accepted(compiler, smollm2_tokenizer, named, HERMES.calls_text(CALLS[:1]))
    limited = tool_grammar([WEATHER, CLOCK], ToolChoice("required", max_calls=1), HERMES)
    assert not accepted(compiler, smollm2_tokenizer, limited, HERMES.calls_text(CALLS))


def test_custom_tools_follow_their_grammar_in_the_default_format(compiler, smollm2_tokenizer):
    grammar = tool_grammar([WEATHER, SQL], ToolChoice("required"), HERMES)
    assert grammar.kind == "llguidance"  # the custom tool's Lark grammar is a side grammar
    assert accepted(compiler, smollm2_tokenizer, grammar, HERMES.calls_text([("sql", "SELECT abc", True)]))
    assert not accepted(compiler, smollm2_tokenizer, grammar, HERMES.calls_text([("sql", "DROP t", True)]))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
@pytest.mark.parametrize("piece", [1, 2, 5])
def test_calls_read_back_whole_and_streamed_alike(fmt, piece):
    text = "Some text " + fmt.calls_text(CALLS)
    content, calls = parse_answer(text, fmt)
    assert content == "Some text " and [(c.name, c.arguments) for c in calls] == [c[:2] for c in CALLS]
    stream, deltas = ToolCallStream(fmt), []
    for start in range(0, len(text), piece):
        deltas += stream.feed(text[start:start + piece])
    deltas += stream.feed("", final=True)
    assert "".join(d.text for d in deltas if isinstance(d, ContentDelta)) == content
    assert [d.call.name for d in deltas if isinstance(d, CallStart)] == [c[0] for c in CALLS]
    for index, (_, arguments, _) in enumerate(CALLS):
        assert "".join(d.text for d in deltas if isinstance(d, ArgumentsDelta) and d.index == index) == arguments


def test_the_template_decides_the_format():
    assert template_format("{{ messages }}") is None  # renders no tools: Flint's default
    assert template_format("{% for t in tools %}<tool_call>{% endfor %}") is HERMES
    assert template_format("{% if tools %}[TOOL_CALLS]{% endif %}") is MISTRAL
    assert template_format("{% if tools %}<|python_tag|>{% endif %}") is LLAMA3_JSON
    assert DEFAULT is HERMES


def test_a_template_that_renders_tools_gets_them_and_the_calls_as_objects():
    template = "{% for t in tools %}{{ t.function.name }}{% endfor %}<tool_call>"
    history = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "utc"}'}}]}]
    messages, variables = tool_conversation(history, [CLOCK], template)
    assert variables["tools"][0]["function"]["name"] == "get_time"
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == {"zone": "utc"}
