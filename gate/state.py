"""What one running gate app owns (`AppState`), and the face of it channels are given.

Built by the composition root (`gate.app.create_app`) and read by everything mounted on the
app (API dependencies, web console, metrics) as `app.state.gate`. Nothing here imports the
composition root, so those modules can depend on this one without a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from gate import deciding, threads
from gate.acting import Result
from gate.auth import TokenBook
from gate.channel import Channel, Click
from gate.config import Settings
from gate.decision_log import DecisionLog
from gate.jobs import Jobs
from gate.models import utcnow
from gate.notify import Notifier
from gate.policy import Policy
from gate.readmodel import RequestView
from gate.scheduler import Scheduler
from gate.service import GateService
from gate.store.db import Database


@dataclass
class AppState:
    """Everything one gate app owns, typed (reached as `app.state.gate`)."""

    settings: Settings
    db: Database
    policy: Policy
    notifier: Notifier
    service: GateService
    tokens: TokenBook
    scheduler: Scheduler
    jobs: Jobs
    channels: dict[str, Channel] = field(default_factory=dict)
    #: None when `[decision_log].enabled` is false
    decision_log: DecisionLog | None = None
    clock: Callable[[], datetime] = utcnow


class ChannelGate:
    """The `ChannelContext` channels get: the decision pipeline and views, never the database."""

    def __init__(self, service: GateService) -> None:
        self._service = service

    @property
    def settings(self) -> Settings:
        """The server's settings (each channel reads its own `[channels.NAME]` table)."""
        return self._service.settings

    async def act(self, click: Click) -> Result:
        """Run a click through the one decision pipeline (in a worker thread)."""
        return await threads.run_sync(lambda: deciding.act(self._service, click))

    async def view(self, request_id: str) -> RequestView | None:
        """The current state of a request."""
        return await threads.run_sync(lambda: self._service.view(request_id))
