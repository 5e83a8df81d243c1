"""A channel that writes cards to the log: useful locally and as the simplest example.

Like every card, a log line shows the call as gate renders it under gate's headline, and the
agent's summary after it, labelled as the agent's claim (`channels.decisions`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter

from channels import decisions
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext
from gate.text import untrusted

log = logging.getLogger("gate.channels.log")
#: characters of a call's rendering one log line holds; a longer call is cut, saying how
#: much is not shown and where the whole call is (a log is searched, not read like a card)
CALL_CHARS = 4000


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
    # The call as gate renders it (cut, it ends saying what is not shown and where the whole
    # call is), before the agent's summary, which is labelled as the agent's claim. Text an
    # agent or a person wrote is cleaned as on every surface: logs are shipped and kept, so
    # secrets are masked; invisible characters go. json.dumps escapes line breaks, so no text
    # can start a log line of its own.
    shown = decisions.arguments(req, CALL_CHARS)
    card: dict[str, Any] = {
        "target": target,
        "request": req.id,
        "headline": decisions.headline(req, shown),
        "tool": untrusted.clean(req.tool_name),
    }
    asked = decisions.why_asked(req)
    if asked:
        key = "condition_failed" if asked.heading == decisions.CONDITION_FAILED else "tripped"
        card[key] = f"{asked.heading} {asked.words}"
    card["call"] = shown.text
    card["call_whole"] = not shown.cut
    claim = decisions.claim(req)
    if claim is not None:
        card["claim"] = f"{decisions.CLAIM_LABEL}: {claim}"
    card |= {
        "status": req.status,
        "outcome": untrusted.clean(req.outcome_sentence()),
        "url": req.url,
    }
    return card
