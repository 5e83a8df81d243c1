"""Logging set-up: plain text for people, JSON lines (with request ids) for machines.

A record may carry `fields` (`extra={"fields": {...}}`): the JSON format writes them as
keys of the line (the access log's method, path, status...), the plain format only the
message, which says the same in words.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime

from gate.base import tracing

#: the current HTTP request's id (`gate.api.middleware` sets it), on every log line
request_id_var: ContextVar[str] = ContextVar("request_id", default="-")


class AccessNote:
    """What the code answering an HTTP request learns for its access log line: who called."""

    __slots__ = ("principal",)

    def __init__(self) -> None:
        self.principal: str | None = None


#: the current request's note, set by the access log (`gate.api.middleware.AccessLog`) while it
#: logs; a worker thread the request hands off to shares the same note (a copied context)
access_note: ContextVar[AccessNote | None] = ContextVar("access_note", default=None)


def note_principal(name: str) -> None:
    """Record who made the current HTTP request, for its access log line (a no-op outside one,
    or when the access log is off)."""
    note = access_note.get()
    if note is not None:
        note.principal = name


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):  # the access log passes its request's own
            record.request_id = request_id_var.get()
        if tracing.tracer is not None:  # tracing on: the line joins its trace (docs/tracing.md)
            ids = tracing.current_ids()
            if ids is not None:
                record.trace_id, record.span_id = ids
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, trace_id and
    span_id (while a traced span is current), the record's `fields`, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
        }
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            entry["trace_id"], entry["span_id"] = trace_id, getattr(record, "span_id", None)
        fields = getattr(record, "fields", None)
        if fields:
            entry.update((k, v) for k, v in fields.items() if k not in entry)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(level: str = "INFO", *, json_logs: bool = False) -> None:
    """Send gate's and uvicorn's logs to stderr in one format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestIdFilter())
    if json_logs:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)-7s %(name)s [%(request_id)s] %(message)s")
        )
    # Neither format writes a record's source line, thread or process: not looking them up
    # makes every record cheaper (the access log writes one per request; ~15% of its cost).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # APScheduler warns on every skipped overlapping tick, which a kicked outbox pump causes
    # by design; only its errors matter.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    # httpx and httpcore log every request's full URL at INFO and DEBUG, and some platforms
    # put credentials in the URL (Telegram's bot token is a path segment): only their
    # warnings reach gate's log, whatever gate's own level.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
