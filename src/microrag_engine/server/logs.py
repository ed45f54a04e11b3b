"""A request id in every log line, the audit row and the response, and JSON-lines logs.

Each request gets an id (the caller's ``X-Request-ID`` when it is a short plain token, as a
proxy or a client that already traced the call sends it; else a fresh one), kept in a
context variable for everything the request runs - the route's thread, the engine, the
audit row (``ServerState.audit``) - and sent back in ``X-Request-ID``. ``serve --log-format
json`` writes one JSON object per line (uvicorn's access and error logs and ours), each with
the id of the request it belongs to.

The access line is written by the app (``microrag.access``), not by uvicorn, whose line is
written outside the request's context (no id). What is logged: method, path (its query
string dropped: a client could put anything there), status, milliseconds, and warnings. No
line carries a header, a key, a question or document text (tested).
"""

from __future__ import annotations

import json
import logging
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from .. import rx

REQUEST_ID: ContextVar[str] = ContextVar("microrag_request_id", default="")
HEADER = "X-Request-ID"
_TOKEN = rx.compile(r"[A-Za-z0-9._:-]{1,64}")


def request_id(sent: str | None) -> str:
    """The id for a request: the caller's own if it is a plain token of at most 64
    characters (anything else could forge log lines or carry data), else a new one."""
    return sent if sent and _TOKEN.fullmatch(sent) else uuid.uuid4().hex


class _WithRequestId(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, request id."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                                "level": record.levelname.lower(), "logger": record.name,
                                "message": _message(record), "request_id": getattr(record, "request_id", "")}
        if record.exc_info:
            line["error"] = record.exc_info[0].__name__ if record.exc_info[0] else "error"
        return json.dumps(line, ensure_ascii=False)


class Text(logging.Formatter):
    """The plain form: ``time level [request id] message``."""

    def format(self, record: logging.LogRecord) -> str:
        rid = getattr(record, "request_id", "")
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{stamp} {record.levelname.lower()} {'[' + rid + '] ' if rid else ''}{_message(record)}"


def _message(record: logging.LogRecord) -> str:
    return record.getMessage()


def log_config(fmt: str, level: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for uvicorn (``uvicorn.run(log_config=...)``): its
    loggers and ours, through one formatter (``fmt``: "json" or "text"), with request ids."""
    formatter = JsonLines if fmt == "json" else Text
    handler = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "microrag",
               "filters": ["request_id"]}
    return {"version": 1, "disable_existing_loggers": False,
            "filters": {"request_id": {"()": _WithRequestId}},
            "formatters": {"microrag": {"()": formatter}},
            "handlers": {"stderr": handler},
            "loggers": {name: {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
                        for name in ("uvicorn", "uvicorn.error", "microrag")}}
