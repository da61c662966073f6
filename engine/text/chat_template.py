"""Chat templates: a checkpoint's Jinja template rendered the way transformers renders it.

The template ships with the checkpoint, so it is untrusted code. It runs in Jinja's
immutable sandbox: no attribute starting with an underscore, no mutating methods on
lists or dicts. The helpers and options match `transformers.apply_chat_template`, so a
template written for Hugging Face renders byte for byte the same here.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(jinja2.TemplateError):
    """The template refused the conversation (its `raise_exception`) or cannot be compiled.

    Raised for a bad request rather than a server fault: the API answers it with a 400.
    """


class MissingChatTemplateError(ChatTemplateError):
    """The checkpoint carries no chat template, so chat messages cannot become a prompt."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.datetime.now().strftime(format)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes <, >, & and ' for HTML and sorts keys; HF templates
    # expect plain json.dumps, or tool schemas reach the model mangled.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


class _GenerationBlock(Extension):
    """Accepts `{% generation %}...{% endgeneration %}` and renders its body unchanged.

    Transformers uses the tag to mark assistant text for training masks; some templates
    carry it, and without the tag they would not even compile.
    """

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> list[jinja2.nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _environment() -> ImmutableSandboxedEnvironment:
    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols]
    )
    environment.filters["tojson"] = _tojson
    environment.globals["raise_exception"] = _raise_exception
    environment.globals["strftime_now"] = _strftime_now
    return environment


class ChatTemplate:
    """One compiled chat template, with the special tokens it may refer to by name."""

    def __init__(self, source: str, special_tokens: Mapping[str, str | None] | None = None):
        """Compile `source`; `special_tokens` maps names such as "bos_token" to their text."""
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise ChatTemplateError(f"the chat template is not valid Jinja: {error}") from error
        self._special_tokens = {k: v for k, v in (special_tokens or {}).items() if v is not None}

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """The prompt text for `messages`; extra keyword arguments become template variables.

        Raises ChatTemplateError when the template calls raise_exception, and Jinja's
        SecurityError (also a TemplateError) when it reaches outside the sandbox.
        """
        variables = {**self._special_tokens, **kwargs}
        return self._template.render(
            messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **variables
        )
