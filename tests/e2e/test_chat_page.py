"""The chat page at `/` in a real browser (headless Chromium, tests/browser.py) against the
session's live SmolLM2 server (tests/e2e/conftest.py), and a tiny-model server with an API key.

Each test leaves a screenshot of the page in its temporary directory."""

from __future__ import annotations

import dataclasses

import json
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpx
import jsonschema
import pytest
from api_helpers import TINY_ENGINE, live_app
from browser import chromium, wait_for
from chat_page import ChatPage, watch_growth
from prometheus_client.parser import text_string_to_metric_families
from qwen3_tiny import R1_STYLE_TEMPLATE, qwen3_checkpoint, qwen3_tokenizer
from tiny_models import tiny_checkpoint

from api.server.app import create_app
from api.server.settings import Settings
from engine.engine import Engine

# Long enough that no reply ends by itself before the test stops it (max_model_len 1024).
LONG_REPLY = 480
# Engine steps a stopped reply may still take: the one in flight when the page aborts, and
# one that may start before the abort lands. A reply the engine kept would take hundreds.
STEPS_TO_LET_GO = 3
PERSON_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
                 "properties": {"name": {"type": "string", "maxLength": 24},
                                "age": {"type": "integer", "minimum": 0, "maximum": 150}}}
RIGHT_KEY = "sk-right-key"
# The tiny servers answer a message or two each: compiled quickly (about half the compile),
# their slower steps are not felt (tests/engine/conftest.py tiny_engine_factory).
QUICK_ENGINE = dataclasses.replace(TINY_ENGINE, optimize_compiled_code=False)


@pytest.fixture(scope="module")
def driver():
    with chromium() as browser:
        yield browser


@pytest.fixture
def page(driver, live_server, tmp_path):
    page = ChatPage(driver, live_server)
    page.open()
    yield page
    page.screenshot(tmp_path)


def running_requests(base_url: str) -> float:
    text = httpx.get(f"{base_url}/metrics").text
    return next(family.samples[0].value for family in text_string_to_metric_families(text)
                if family.name == "flint:num_requests_running")


def test_a_sent_message_streams_a_reply_that_grows_and_ends_with_its_stats(page):
    page.set_settings(max_tokens=120, temperature=0)
    page.send("Tell me a story about a lighthouse keeper.")
    lengths = watch_growth(page)
    # Seen part-written at least three times, each longer: streamed, not shown whole at the end.
    assert len(lengths) >= 3 and lengths == sorted(lengths), lengths
    stats = page.wait_until_replied()
    assert "tok/s" in stats and "first token" in stats and "completion tokens" in stats, stats
    assert page.messages()[0] == ("user", "Tell me a story about a lighthouse keeper.")
    assert page.reply_text() and len(page.reply_text()) >= lengths[-1] - 5


def test_stop_aborts_the_generation_in_the_engine(page, live, monkeypatch):
    engine = live.state.engine.engine
    steps_after_stop = []
    step = engine.step

    def counted_step():
        if steps_after_stop:
            steps_after_stop[0] += 1
        return step()

    monkeypatch.setattr(engine, "step", counted_step)
    page.set_settings(max_tokens=LONG_REPLY, temperature=0.7, seed=7)
    page.send("Write a very long essay on the history of computing, in many sections.")
    wait_for(lambda: len(page.reply_text()) > 20, 120, "the reply to begin")
    assert running_requests(page.base_url) == 1
    steps_after_stop.append(0)
    page.element("stop").click()
    assert "stopped" in page.wait_until_replied(30)
    wait_for(lambda: running_requests(page.base_url) == 0, 60, "flint:num_requests_running to return to 0")
    assert steps_after_stop[0] <= STEPS_TO_LET_GO, f"the engine ran {steps_after_stop[0]} steps after the stop"
    assert page.reply_text()  # the text so far is kept
    page.send("Thanks, that is enough.")  # and the page goes on
    assert page.wait_until_replied()


def test_a_reload_keeps_the_conversation(page):
    page.set_settings(max_tokens=24)
    page.send("Name three colours.")
    page.wait_until_replied()
    shown = page.messages()
    page.driver.refresh()
    wait_for(lambda: len(page.messages()) == 2, 30, "the kept messages")
    assert page.messages() == shown
    kept = page.kept_conversations()
    assert [message["role"] for message in kept[0]["messages"]] == ["user", "assistant"]
    assert kept[0]["title"] == "Name three colours."
    assert page.driver.find_element("css selector", "#conversations li.current").text.startswith("Name three colours.")


def test_the_structured_output_toggle_gives_json_that_validates(page):
    page.set_settings(json_mode=True, schema=json.dumps(PERSON_SCHEMA), max_tokens=120, temperature=0.7, seed=3)
    page.send("Invent a person: their name and age.")
    assert "length" not in page.wait_until_replied()
    reply = page.kept_conversations()[0]["messages"][-1]["content"]
    jsonschema.validate(json.loads(reply), PERSON_SCHEMA)
    # Shown as a highlighted JSON block.
    block = page.last_reply().find_element("css selector", "pre code")
    assert "language-json" in block.get_attribute("class") and "hljs" in block.get_attribute("class")


def test_shift_enter_adds_a_line_and_enter_sends(page):
    page.set_settings(max_tokens=8)
    page.type_message("first line")
    page.element("input").send_keys("\ue008\ue007")  # Shift held, then Enter
    page.type_message("second line")
    assert page.element("input").get_attribute("value") == "first line\nsecond line"
    assert page.messages() == []
    page.element("input").send_keys("\ue007")  # Enter alone
    wait_for(lambda: page.messages(), 10, "the message to be sent")
    assert page.messages()[0] == ("user", "first line\nsecond line")
    page.wait_until_replied()


def test_the_page_loads_nothing_from_elsewhere_and_follows_a_dark_system(page):
    resources = page.driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(urlsplit(url).netloc == urlsplit(page.base_url).netloc for url in resources), resources
    assert "default-src 'self'" in httpx.get(f"{page.base_url}/").headers["content-security-policy"]
    page.driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                                {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    assert background_lightness(page) < 0.3
    page.element("theme").click()  # auto -> light
    assert background_lightness(page) > 0.7
    page.driver.refresh()  # the choice is kept
    assert background_lightness(page) > 0.7


def background_lightness(page: ChatPage) -> float:
    color = page.driver.execute_script("return getComputedStyle(document.body).backgroundColor")
    red, green, blue = (int(part) for part in color[color.index("(") + 1:color.index(")")].split(",")[:3])
    return (red + green + blue) / (3 * 255)


@contextmanager
def tiny_server(checkpoint, tokenizer, settings: Settings) -> Iterator[str]:
    """A live server of a tiny random model (compiled in seconds), yielding its base URL."""

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(checkpoint, tokenizer, settings.engine)
        engine.runner.warmup()
        return engine

    with live_app(create_app(settings, engine_factory=engine_factory)) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def keyed_server(smollm2_tokenizer, tmp_path_factory):
    """A server with an API key, on a tiny random model: the key is checked before any model runs."""
    settings = Settings(engine=QUICK_ENGINE, api_key=RIGHT_KEY, data_dir=str(tmp_path_factory.mktemp("keyed")))
    with tiny_server(tiny_checkpoint(smollm2_tokenizer.vocab_size), smollm2_tokenizer, settings) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def reasoning_server(tmp_path_factory):
    """A tiny reasoning model whose template opens the thinking section (DeepSeek-R1's way):
    being random, it stays there, so its replies are all thinking."""
    tokenizer = qwen3_tokenizer(chat_template=R1_STYLE_TEMPLATE)
    settings = Settings(engine=QUICK_ENGINE, data_dir=str(tmp_path_factory.mktemp("reasoning")))
    with tiny_server(qwen3_checkpoint(tokenizer.vocab_size), tokenizer, settings) as base_url:
        yield base_url


def test_a_reasoning_model_s_thinking_is_shown_apart_and_folded(driver, reasoning_server, tmp_path):
    page = ChatPage(driver, reasoning_server)
    page.open()
    page.set_settings(max_tokens=24, temperature=0)
    page.send("What is 6 x 7?")
    page.wait_until_replied(60)
    thinking = page.last_reply().find_element("css selector", "details.reasoning")
    assert thinking.is_displayed() and thinking.get_attribute("open") is None  # folded once the reply ended
    kept = page.kept_conversations()[0]["messages"][-1]
    assert kept["reasoning"] and not kept["content"]
    thinking.find_element("tag name", "summary").click()  # unfolds on a click
    thoughts = thinking.find_element("class name", "thoughts")
    assert thoughts.is_displayed() and thoughts.get_attribute("textContent") == kept["reasoning"]
    assert page.reply_text() == ""  # the answer's place holds none of it
    page.screenshot(tmp_path, "reasoning.png")


def test_with_an_api_key_set_a_wrong_key_shows_the_error(driver, keyed_server, tmp_path):
    page = ChatPage(driver, keyed_server)
    page.open()
    page.set_settings(api_key="sk-wrong-key", max_tokens=8)
    page.send("Hello?")
    page.wait_until_replied(30)
    assert "401" in page.reply_error() and "Incorrect API key" in page.reply_error()
    page.screenshot(tmp_path, "wrong-key.png")
    page.set_settings(api_key=RIGHT_KEY)
    page.send("Hello again?")
    stats = page.wait_until_replied(60)
    assert not page.reply_error() and "completion tokens" in stats


# Wraps the page's fetch to keep each chat request's body, as the server receives it.
RECORD_REQUESTS = """
window.sentBodies = [];
const fetchBefore = window.fetch;
window.fetch = (url, options) => {
  if (String(url).endsWith('/v1/chat/completions')) window.sentBodies.push(JSON.parse(options.body));
  return fetchBefore(url, options);
};
"""


def test_the_settings_and_the_system_prompt_go_with_each_request(page):
    page.set_settings(system="Answer in French.", temperature=0.3, top_p=0.9, max_tokens=16, seed=11)
    page.driver.execute_script(RECORD_REQUESTS)
    page.send("Say hello.")
    page.wait_until_replied()
    page.send("Again.")
    page.wait_until_replied()
    first, second = page.driver.execute_script("return window.sentBodies")
    for body in (first, second):
        assert {key: body[key] for key in ("temperature", "top_p", "max_tokens", "seed", "stream")} == \
            {"temperature": 0.3, "top_p": 0.9, "max_tokens": 16, "seed": 11, "stream": True}
        assert body["stream_options"] == {"include_usage": True}
    assert first["messages"] == [{"role": "system", "content": "Answer in French."},
                                 {"role": "user", "content": "Say hello."}]
    reply = page.kept_conversations()[0]["messages"][1]["content"]
    assert second["messages"][1:] == [{"role": "user", "content": "Say hello."},
                                      {"role": "assistant", "content": reply},
                                      {"role": "user", "content": "Again."}]
