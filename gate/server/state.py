"""What one running gate app owns (`AppState`), and the face of it channels are given.

Built by the composition root (`gate.app.create_app`) and read by everything mounted on the
app (API dependencies, web console, metrics) as `app.state.gate`. Nothing here imports the
composition root, so those modules can depend on this one without a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from gate.base import threads
from gate.base.notify import Notifier
from gate.base.statuses import utcnow
from gate.config.settings import Settings
from gate.decisions import deciding, identities
from gate.decisions.acting import Result
from gate.decisions.clicks import Click, LinkAnswer
from gate.decisions.decision_log import DecisionLog
from gate.decisions.readmodel import RequestView
from gate.decisions.service import GateService
from gate.delivery.channel import Channel
from gate.delivery.jobs import Jobs
from gate.delivery.scheduler import Scheduler
from gate.delivery.webhooks import WebhookSender
from gate.identity.auth import TokenBook
from gate.policy.rules import Policy
from gate.server.telemetry import Tracing
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
    #: tracing as this app started it (`gate.server.telemetry`); None when it is off
    tracing: Tracing | None = None
    #: sends `[[webhooks]]` messages; None when none is configured
    webhooks: WebhookSender | None = None


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

    async def link(
        self, channel: str, user_id: str, code: str, *, exposed: bool = False
    ) -> LinkAnswer:
        """Bind a platform id to the approver who was given `code` (in a worker thread)."""
        service = self._service
        now = service.clock()
        return await threads.run_sync(
            lambda: identities.complete_link(
                service.settings, service.db, channel, user_id, code, now, exposed=exposed
            )
        )
