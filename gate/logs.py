"""Logging set-up: plain text for people, JSON lines (with request ids) for machines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from gate.api.middleware import request_id_var

        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
        }
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
