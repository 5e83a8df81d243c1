"""The scheduled jobs of one app: expiry sweep, outbox pump, reminders and escalations.

Each is idempotent and safe on every replica at once (compare-and-set transitions, leased
outbox claims, compare-and-set reminder markers); `gate.scheduler` only says when they run.
The database work runs in worker threads, off the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import anyio

from gate import outbox, reminders
from gate.channel import Channel
from gate.models import utcnow
from gate.readmodel import RequestView
from gate.service import GateService


def _ignore(seconds: float) -> None:
    return None


@dataclass
class Jobs:
    """The jobs, bound to one app's service and channels."""

    service: GateService
    channels: dict[str, Channel]
    clock: Callable[[], datetime] = utcnow
    #: told how long each sweep took, in seconds (metrics)
    on_sweep: Callable[[float], None] = _ignore

    async def sweep(self) -> int:
        """Expire every request whose deadline passed; returns how many."""
        started = time.perf_counter()
        done = await anyio.to_thread.run_sync(lambda: self.service.expire_due(self.clock()))
        self.on_sweep(time.perf_counter() - started)
        return done

    async def pump_outbox(self) -> int:
        """Send every due delivery once; returns how many rows were handled."""
        db = self.service.db
        # The first row's request is read in the same trip to a worker thread as the claim.
        claims, first = await anyio.to_thread.run_sync(self._claim)
        for n, claim in enumerate(claims):
            # Each card shows its request as read just before sending it: a view read for
            # the whole batch up front could be older than a refresh another replica sent
            # meanwhile, and overwrite it.
            view = first if n == 0 else None
            if n > 0:
                view = await anyio.to_thread.run_sync(self.service.view, claim.request_id)
            await outbox.deliver(
                db,
                claim,
                channels=self.channels,
                view=view,
                now=self.clock,
                max_attempts=self.service.settings.server.outbox_max_attempts,
                run_sync=anyio.to_thread.run_sync,
            )
        return len(claims)

    def _claim(self) -> tuple[list[outbox.Claimed], RequestView | None]:
        claims = outbox.claim_due(self.service.db, self.clock())
        return claims, self.service.view(claims[0].request_id) if claims else None

    async def remind(self) -> tuple[int, int]:
        """Send due reminders and escalations; returns (reminded, escalated)."""
        return await anyio.to_thread.run_sync(
            lambda: reminders.remind_and_escalate(self.service, self.clock())
        )
