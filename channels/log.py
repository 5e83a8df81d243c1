"""A channel that writes cards to the log: useful locally and as the simplest example."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter

from gate import untrusted
from gate.channel import ChannelContext
from gate.readmodel import RequestView

log = logging.getLogger("gate.channels.log")


class LogChannel:
    """Writes each card (and each update) as one log line; no callbacks."""

    name = "log"
    display_name = "the log"
    settings_model = None

    def __init__(self, gate: ChannelContext) -> None:
        self.gate = gate

    @classmethod
    def from_settings(cls, settings: Any, gate: ChannelContext) -> LogChannel:
        """Build from `[channels.log]` (no settings)."""
        return cls(gate)

    async def post(self, req: RequestView, target: str) -> str:
        """Log the card; the reference is the request id."""
        log.info("card %s", json.dumps(_card(req, target), default=str))
        return f"log:{req.id}"

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        """Log the new state."""
        log.info("card update %s", json.dumps(_card(req, target), default=str))

    def router(self) -> APIRouter | None:
        """No callbacks."""
        return None

    async def aclose(self) -> None:
        """Nothing to close."""


def _card(req: RequestView, target: str) -> dict[str, Any]:
    return {
        "target": target,
        "request": req.id,
        # Text an agent or a person wrote is cleaned as on every surface: logs are shipped
        # and kept, so secrets are masked; invisible characters go. json.dumps escapes line
        # breaks, so no text can start a log line of its own.
        "tool": untrusted.clean(req.tool_name),
        "summary": untrusted.clean(req.summary) if req.summary is not None else None,
        "status": req.status,
        "outcome": untrusted.clean(req.outcome_sentence()),
        "url": req.url,
    }
