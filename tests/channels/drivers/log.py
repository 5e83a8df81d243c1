"""The log channel's driver: cards are log lines, read back from the channel's logger."""

from __future__ import annotations

import json
import logging
from typing import Any

from tests.channels.drivers.base import Card, Driver, invisible
from tests.support.servers import wait_until


class _Records(logging.Handler):
    """Keeps every record the log channel writes."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class LogDriver(Driver):
    """The log channel: each card and each update is one log line, read back from the logger."""

    name = "log"
    no_clicks = "the log channel shows cards but takes no clicks"
    no_outage = "the log channel writes to the process's own log, which has no outage"
    LOGGER = "gate.channels.log"

    def start(self) -> None:
        self.handler = _Records()
        self.logger = logging.getLogger(self.LOGGER)
        self.level = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self.handler)

    def stop(self) -> None:
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)

    def _lines(self, request_id: str) -> list[tuple[str, dict[str, Any]]]:
        lines = []
        for record in list(self.handler.records):
            message = record.getMessage()
            _, brace, rest = message.partition("{")
            try:
                card = json.loads(brace + rest)
            except ValueError:
                continue
            if isinstance(card, dict) and card.get("request") == request_id:
                lines.append((message, card))
        return lines

    def card(self, request_id: str) -> Card:
        lines = wait_until(lambda: self._lines(request_id))
        raw = [message for message, _ in lines]
        return Card(json.dumps(lines[-1][1], ensure_ascii=False), len(lines) - 1, frozenset(), raw)

    def live_markup(self, card: Card, request_id: str, own_url: str) -> list[str]:
        # A log line is live when untrusted text can start a line of its own (a forged
        # entry) or hide what it says (terminal escapes, direction overrides).
        live = []
        for line in card.raw:
            live += [f"line break in: {line[:60]}" for c in ("\n", "\r") if c in line]
            live += invisible(line)
        return live
