"""The documented caps on what one request may ask for (README: "Limits").

Every list a request can carry has a cap, checked before any work is done for it, with a
400 naming the field above it; the engine then never spends a step on a list larger than
these. Lists whose items each cost at least one prompt token (prompt token ids, messages,
input items) are capped by the context window instead, where the prompt-fits check
refuses them (api/core/prompt.py), after the body size limit has bounded the parsing.
"""

from __future__ import annotations

from collections.abc import Sized

from api.core.errors import invalid

# Engine requests (choices) one HTTP request may make: prompts x n. Admission control counts
# them, not HTTP requests (api/core/admission.py).
MAX_CHOICES = 128
MAX_STOP_STRINGS = 4  # `stop`: OpenAI's and Fireworks' limit
MAX_STOP_SEQUENCES = 16  # Anthropic's `stop_sequences`
MAX_STOP_TOKEN_IDS = 64  # Friendli's `eos_token`, and `stop_tokens` (its sequences' ids in all), each
MAX_BAD_WORDS = 64  # Friendli's `bad_words` and `bad_word_tokens` phrases, each
MAX_PHRASE_TOKENS = 32  # tokens of one bad-word phrase
MAX_FORCED_TOKENS = 256  # Friendli's `forced_output_tokens`
MAX_NO_REPEAT_NGRAM = 32  # Friendli's `no_repeat_ngram`: its bans cost n x length on every step
MAX_STRING_CHARS = 256  # one stop string or bad word
MAX_BUDGET_END_CHARS = 1024  # Fireworks' `thinking.budget_end_str`, encoded as each request is planned
MAX_INCLUDE = 16  # the Responses API's `include` (it names a handful of kinds of extra data)


def check_list(field: str, items: Sized | None, cap: int, what: str = "items") -> None:
    """A 400 naming `field` when it holds more than `cap` items."""
    if items is not None and len(items) > cap:
        raise invalid(field, f"`{field}` may hold at most {cap} {what}; got {len(items)}")


def check_choices(num_prompts: int, n: int, *, prompt_field: str = "prompt") -> None:
    """prompts x n choices within MAX_CHOICES; the 400 names `n`, or the prompt list when
    it alone is too long."""
    check_list(prompt_field, range(num_prompts), MAX_CHOICES, "prompts")
    if num_prompts * n > MAX_CHOICES:
        raise invalid("n", f"this request asks for {num_prompts} prompt(s) x n={n} = {num_prompts * n} "
                           f"choices; at most {MAX_CHOICES} are served per request")


def check_strings(field: str, strings: tuple[str, ...], cap: int) -> tuple[str, ...]:
    """Stop strings or bad words: at most `cap`, none empty, none longer than MAX_STRING_CHARS."""
    check_list(field, strings, cap, "strings")
    if any(not string for string in strings):
        raise invalid(field, f"`{field}` strings must not be empty")
    if any(len(string) > MAX_STRING_CHARS for string in strings):
        raise invalid(field, f"`{field}` strings may be at most {MAX_STRING_CHARS} characters long")
    return strings
