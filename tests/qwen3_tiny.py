"""A tiny Qwen3-style reasoning model for tests: a small byte-level vocabulary with Qwen3's
added tokens (their order and special flags as Qwen3's tokenizer has them: `<think>` and
`</think>` are added tokens that are not "special"), Qwen3's chat template, and a tiny
random Llama over that vocabulary.

The vocabulary holds the ASCII bytes only, so every generated token is a whole character and
texts derived from token ids compare exactly. A DeepSeek-R1-style template (its generation
prompt opens the thinking section itself) is here too, for the outputs that start inside it.
"""

from __future__ import annotations

import json

import tokenizers

from engine.config import ModelConfig
from engine.loader.checkpoint import Checkpoint
from engine.loader.source import ModelSource
from engine.models.params import random_params
from engine.text.tokenizer import Tokenizer

# Qwen3's added tokens, in order, with whether each is "special".
QWEN3_ADDED_TOKENS = (
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True), ("<|box_end|>", True),
    ("<|quad_start|>", True), ("<|quad_end|>", True), ("<|vision_start|>", True), ("<|vision_end|>", True),
    ("<|vision_pad|>", True), ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False),
    ("<|fim_prefix|>", False), ("<|fim_middle|>", False), ("<|fim_suffix|>", False), ("<|fim_pad|>", False),
    ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
)

# Qwen3's chat template (Qwen/Qwen3-8B tokenizer_config.json), transcribed: a model
# artifact, the text the thinking support must read.
QWEN3_CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

# DeepSeek-R1's way, reduced to its turns: the generation prompt opens the section, and
# earlier answers keep only what follows `</think>`.
R1_STYLE_TEMPLATE = (
    "{% for message in messages %}{% if message.role == 'user' %}<|im_start|>user\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content.split('</think>')[-1] }}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")

ASCII_BYTES = range(128)


def byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte-level spelling of each byte (printable ones as themselves)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [byte for byte in range(256) if byte not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + i) for i, b in enumerate(others)}}


# llguidance counts every added token as special, Qwen3's `<tool_call>` too, and a grammar
# that wants the text "<tool_call>" then forces that token and refuses it (engine/text/grammar.py's
# matchers abort): with this vocabulary no tool call can be constrained. A tokenizer for tool
# tests may keep the ids and leave those two names out, so the tags are written as text.
TOOL_TAGS = ("<tool_call>", "</tool_call>")


def qwen3_tokenizer_json(tool_tokens: bool = True) -> str:
    """A byte-level BPE over the ASCII bytes (no merges), then Qwen3's added tokens (with
    `tool_tokens` False, the tool-call tags' two ids hold placeholders instead)."""
    alphabet = byte_level_alphabet()
    vocab = {alphabet[byte]: byte for byte in ASCII_BYTES}
    names = [(content if tool_tokens or content not in TOOL_TAGS else f"<|unused_{index}|>", special)
             for index, (content, special) in enumerate(QWEN3_ADDED_TOKENS)]
    added = [{"id": len(vocab) + index, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": special} for index, (content, special) in enumerate(names)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    })


def qwen3_tokenizer(chat_template: str = QWEN3_CHAT_TEMPLATE, tool_tokens: bool = True) -> Tokenizer:
    """The tiny Qwen3-style tokenizer: EOS is `<|im_end|>` then `<|endoftext|>`, as Qwen3's
    generation config lists them."""
    tokenizer = tokenizers.Tokenizer.from_str(qwen3_tokenizer_json(tool_tokens))
    end_ids = [tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")]
    return Tokenizer(tokenizer, eos_token_ids=end_ids, pad_token_id=end_ids[1], chat_template=chat_template)


def qwen3_checkpoint(vocab_size: int, context_length: int = 2048, seed: int = 0) -> Checkpoint:
    """A 2-layer random Llama over the tiny vocabulary, with room for long thoughts."""
    config = ModelConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                         num_kv_heads=2, head_dim=8, max_position_embeddings=context_length)
    source = ModelSource(id="tiny-qwen3", path=None, format="hf", context_length=context_length)
    return Checkpoint(config, random_params(config, seed=seed), source)
