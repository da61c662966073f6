"""Log lines: the JSON formatter, the request id on records made while a request is served,
the access line of every request (streams once they end), and `--log-format`."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from chat_helpers import MODEL_ID

from api.server.cli import build_parser
from api.server.logs import JsonFormatter, RequestIdFilter, logging_config, uvicorn_logging
from api.server.request_id import serving
from api.server.serve import settings_from_args


def record(message: str = "engine %s", *args: object, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("flint", logging.WARNING, __file__, 1, message, args or None, exc_info)


def formatted(log_record: logging.LogRecord) -> dict:
    RequestIdFilter().filter(log_record)
    line = JsonFormatter().format(log_record)
    assert "\n" not in line  # one line per record, tracebacks included
    return json.loads(line)


def test_a_json_line_has_the_fields_a_collector_reads():
    with serving("req-42"):
        entry = formatted(record("engine %s", "ready"))
    assert entry["message"] == "engine ready" and entry["level"] == "WARNING" and entry["logger"] == "flint"
    assert entry["request_id"] == "req-42"
    assert entry["timestamp"].endswith("+00:00") and "T" in entry["timestamp"]


def test_outside_a_request_there_is_no_request_id():
    assert "request_id" not in formatted(record())


def test_a_traceback_stays_inside_its_line():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        entry = formatted(record("failed", exc_info=sys.exc_info()))
    assert entry["exception"].startswith("Traceback") and "RuntimeError: boom" in entry["exception"]


def access_records(caplog) -> list[logging.LogRecord]:
    return [entry for entry in caplog.records if entry.name == "flint.access"]


def test_every_request_logs_one_access_line(shared_tiny_client, caplog):
    caplog.set_level(logging.INFO, logger="flint.access")
    body = {"model": MODEL_ID, "prompt": "Hello", "max_tokens": 3, "stream": True}
    with shared_tiny_client.stream("POST", "/v1/completions", json=body, headers={"X-Request-Id": "s-1"}) as stream:
        sent = sum(len(chunk) for chunk in stream.iter_bytes())
    shared_tiny_client.get("/no/such/path", headers={"X-Request-Id": "missing-1"})
    streamed, missing = access_records(caplog)
    assert (streamed.request_id, missing.request_id) == ("s-1", "missing-1")
    assert streamed.http["method"] == "POST" and streamed.http["path"] == "/v1/completions"
    assert streamed.http["status"] == 200 and streamed.http["streamed"] is True
    assert streamed.http["bytes"] == sent > 0 and streamed.http["duration_ms"] > 0
    assert missing.http["status"] == 404 and missing.http["streamed"] is False
    entry = formatted(streamed)  # as `--log-format json` writes it
    assert (entry["request_id"], entry["status"], entry["path"]) == ("s-1", 200, "/v1/completions")


def test_the_log_format_flag():
    def parse(*flags: str):
        return settings_from_args(build_parser().parse_args(["serve", *flags]))

    assert parse().log_format == "text"
    assert parse("--log-format", "json").log_format == "json"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--log-format", "xml"])


def test_json_reaches_litestar_and_uvicorn():
    config = logging_config("json")
    assert config.formatters["standard"] == {"()": JsonFormatter}
    assert all(handler["filters"] == ["request_id"] for handler in config.handlers.values())
    assert logging_config("text").formatters["standard"] != {"()": JsonFormatter}
    # uvicorn's access log is ours now; with json its own loggers write through the root's handlers.
    assert uvicorn_logging("text") == {"access_log": False}
    assert uvicorn_logging("json") == {"access_log": False, "log_config": None}
    with pytest.raises(ValueError):
        logging_config("xml")
