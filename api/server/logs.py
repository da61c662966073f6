"""Log lines: as text (Litestar's format, the default) or one JSON object a line
(`flint serve --log-format json`, for log collectors), and one access line per HTTP request.

Both formats go through the standard `logging` module, configured by the Litestar app
(`logging_config`) and by uvicorn (`uvicorn_logging`). Every record made while a request is
served carries its id (`request_id`, api/server/request_id.py): the filter reads it in the thread
that logs, before Litestar's queue hands the record to the thread that writes it.

The access line (logger `flint.access`) replaces uvicorn's, which is turned off: it has the
request's id, its duration and its size, and a streamed answer is logged once it has ended."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

from litestar.logging.config import LoggingConfig

from api.server.request_id import current_request_id
from api.server.settings import LOG_FORMATS

ACCESS = logging.getLogger("flint.access")


class RequestIdFilter(logging.Filter):
    """Gives each record `request_id`: the request being served where it was made, else None."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = current_request_id()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: timestamp (UTC, ISO 8601), level, logger, message, request_id
    where known, an access line's fields (its `http` extra), and a traceback as `exception`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if getattr(record, "request_id", None) is not None:
            entry["request_id"] = record.request_id
        entry.update(getattr(record, "http", None) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def logging_config(log_format: str) -> LoggingConfig:
    """Litestar's logging set-up (the root logger's handlers, through its queue), with the
    request id filter on every handler and, for "json", the JSON formatter."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"the log format must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    default = LoggingConfig()
    formatters = dict(default.formatters)
    if log_format == "json":
        formatters["standard"] = {"()": JsonFormatter}
    handlers = {name: {**handler, "filters": ["request_id"]} for name, handler in default.handlers.items()}
    return LoggingConfig(formatters=formatters, handlers=handlers,
                         filters={"request_id": {"()": RequestIdFilter}})


def uvicorn_logging(log_format: str) -> dict[str, Any]:
    """uvicorn.Config's logging arguments. Its access log is off (ours replaces it). With
    json its own loggers are left unconfigured, so that their records reach the root
    logger's JSON handler; with text they keep uvicorn's format."""
    return {"access_log": False, **({"log_config": None} if log_format == "json" else {})}


def log_access(*, method: str, path: str, status: int | None, duration_ms: float, request_id: str,
               client: str | None, num_bytes: int, streamed: bool) -> None:
    """One request's access line, once its answer has ended (status None: it never began)."""
    fields = {"method": method, "path": path, "status": status, "duration_ms": round(duration_ms, 1),
              "client": client, "bytes": num_bytes, "streamed": streamed}
    ACCESS.info('%s "%s %s" %s %.1f ms, %d bytes%s, request %s', client or "-", method, path,
                status if status is not None else "-", duration_ms, num_bytes, " streamed" if streamed else "",
                request_id, extra={"request_id": request_id, "http": fields})
