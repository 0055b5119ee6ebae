# How the broker's log lines look: Python's plain text (the default) or one JSON object per line
# for log shippers. A JSON line always has timestamp (ISO-8601, UTC, milliseconds), level,
# logger and message; inside a connection it adds the request context (request_context.py);
# an exception adds exception (the formatted traceback) and exception_type. Writing, rotating
# and shipping the lines is the platform's business (docs/operator-guide.md).
from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

from lockgate.server.log_context import context_fields

FORMATS = ("plain", "json")
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines in messages are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = getattr(record, "context", None)
        if isinstance(context, dict):
            line.update(context)
        if record.exc_info:
            line["exception_type"] = getattr(record.exc_info[0], "__name__", "")
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class RequestContextFilter(logging.Filter):
    """Copies the emitting task's connection and request context onto the record, at emission
    (a handler that formats later, in another thread, would see another context)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "context"):
            record.context = context_fields()
        return True


def log_handler(log_format: str, stream: TextIO | None = None) -> logging.Handler:
    """A stream handler (stderr by default) writing `log_format` lines."""
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        handler.addFilter(RequestContextFilter())
    else:
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    return handler
