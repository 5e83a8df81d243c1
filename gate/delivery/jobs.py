"""The scheduled jobs of one app: expiry sweep, outbox pump, reminders and escalations.

Each is idempotent and safe on every replica at once (compare-and-set transitions, leased
outbox claims, compare-and-set reminder markers); `gate.delivery.scheduler` only says when they run.
The database work runs in worker threads, off the event loop.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from gate.base import threads
from gate.base.statuses import DeliveryKind, utcnow
from gate.decisions import history
from gate.decisions.readmodel import RequestView
from gate.decisions.service import GateService
from gate.delivery import reminders, sending
from gate.delivery.channel import Channel
from gate.store import outbox


def _ignore(seconds: float) -> None:
    return None


def _no_kick() -> None:
    return None


def _stopped() -> bool:
    return False


#: how many cards' newest handed update this replica remembers (see `Jobs._stale`)
REMEMBERED_CARDS = 4096


@dataclass
class Jobs:
    """The jobs, bound to one app's service and channels."""

    service: GateService
    channels: dict[str, Channel]
    clock: Callable[[], datetime] = utcnow
    #: told how long each sweep took, in seconds (metrics)
    on_sweep: Callable[[float], None] = _ignore
    #: runs the pump now (`Scheduler.kick`); set when the scheduler is built
    kick: Callable[[], None] = _no_kick
    #: whether the scheduler is running the pump (`Scheduler.running`)
    running: Callable[[], bool] = _stopped
    #: rows claimed by committed transactions on this replica, with the views they built
    _handed: deque[tuple[outbox.Claimed, RequestView | None]] = field(default_factory=deque)
    #: per card (request, channel, target): the newest update row id handed and sent here
    _newest: OrderedDict[tuple[str, str, str], int] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: when the pump last claimed due rows from the database (monotonic seconds)
    _claimed_at: float = float("-inf")

    async def sweep(self) -> int:
        """Expire every request whose deadline passed; returns how many."""
        started = time.perf_counter()
        done = await threads.run_sync(lambda: self.service.expire_due(self.clock()))
        self.on_sweep(time.perf_counter() - started)
        return done

    def accepting(self) -> bool:
        """True while the scheduler runs the pump, so rows handed over will be sent."""
        return self.running()

    def hand_over(self, rows: list[tuple[outbox.Claimed, RequestView | None]]) -> None:
        """Take rows a committed transaction claimed for this pump, and run it (any thread)."""
        if not self.running():  # stopped since the transaction began: nobody would send them
            sending.release(self.service.db, [claim for claim, _ in rows])
            return
        with self._lock:
            self._handed.extend(rows)
        self.kick()

    async def pump_outbox(self, *, claim: bool = True) -> int:
        """Send the rows handed over, then every due delivery; returns how many rows were
        handled.

        With `claim=False` (the scheduler's runs) due rows are claimed from the database
        only when nothing was handed over or a pump interval has passed since the last
        claim: a change on this replica hands its own rows over, so the claim's transaction
        is needed only for retries, rows a dead replica left, and rows written without a
        running pump.
        """
        with self._lock:
            handed = sorted(self._handed, key=lambda item: item[0].id)
            self._handed.clear()
        for claimed, view in handed:
            await self._send_handed(claimed, view)
        interval = self.service.settings.server.outbox_interval_seconds
        if handed and not claim and time.monotonic() - self._claimed_at < interval * 0.9:
            return len(handed)
        self._claimed_at = time.monotonic()
        return len(handed) + await self._pump_due()

    async def scheduled_pump(self) -> int:
        """The scheduler's run of the pump (`pump_outbox(claim=False)`)."""
        return await self.pump_outbox(claim=False)

    async def _send_handed(self, claim: outbox.Claimed, view: RequestView | None) -> None:
        if self._stale(claim):
            # a later update of the same card was already sent from here: sending this
            # one now would put an older state back on the card
            db = self.service.db
            await threads.run_sync(sending.mark_superseded, db, claim, self.clock())
            return
        if view is None:
            view = await threads.run_sync(self.service.view, claim.request_id)
        await self._deliver(claim, view)

    async def _deliver(self, claim: outbox.Claimed, view: RequestView | None) -> None:
        done = await sending.deliver(
            self.service.db,
            claim,
            channels=self.channels,
            view=view,
            now=self.clock,
            max_attempts=self.service.settings.server.outbox_max_attempts,
            run_sync=threads.run_sync,
        )
        if done == sending.REFRESH_OWED:  # due now in the database: another run claims it
            self.kick()

    def _stale(self, claim: outbox.Claimed) -> bool:
        """True for an update older than one already handed and sent for its card.

        Two changes of one request commit in order, but their threads may hand their rows
        over in the other order; row ids follow the commits (the request's lock orders
        them), so the newer update wins.
        """
        if claim.kind != DeliveryKind.update:
            return False
        card = (claim.request_id, claim.channel, claim.target)
        newest = self._newest.get(card)
        if newest is not None and newest > claim.id:
            return True
        self._newest[card] = claim.id
        self._newest.move_to_end(card)
        while len(self._newest) > REMEMBERED_CARDS:
            self._newest.popitem(last=False)
        return False

    async def _pump_due(self) -> int:
        """Claim due rows from the database and send each."""
        # The first row's request is read in the same trip to a worker thread as the claim.
        claims, first = await threads.run_sync(self._claim)
        for n, claim in enumerate(claims):
            # Each card shows its request as read just before sending it: a view read for
            # the whole batch up front could be older than a refresh another replica sent
            # meanwhile, and overwrite it.
            view = first if n == 0 else None
            if n > 0:
                view = await threads.run_sync(self.service.view, claim.request_id)
            await self._deliver(claim, view)
        return len(claims)

    def _claim(self) -> tuple[list[outbox.Claimed], RequestView | None]:
        claims = outbox.claim_due(self.service.db, self.clock())
        return claims, self.service.view(claims[0].request_id) if claims else None

    def release_handed(self) -> int:
        """Give back the lease of every handed row not sent yet (at shutdown), so another
        replica or the next start sends them at once instead of after the lease."""
        with self._lock:
            left = [claim for claim, _ in self._handed]
            self._handed.clear()
        if left:
            sending.release(self.service.db, left)
        return len(left)

    async def prune(self) -> tuple[int, int]:
        """The prune job: the decision log's retention, then the history rows no window can
        reach any more (`gate.decisions.history.prune`)."""
        found = await self.prune_decisions()
        await threads.run_sync(history.prune, self.service.db, self.service.settings, self.clock())
        return found

    async def prune_decisions(self) -> tuple[int, int]:
        """Apply the decision log's retention (idempotent: any replica, any time)."""
        decision_log = self.service.decision_log
        if decision_log is None:
            return 0, 0
        return await threads.run_sync(decision_log.prune, self.clock())

    async def remind(self) -> tuple[int, int]:
        """Send due reminders and escalations; returns (reminded, escalated)."""
        return await threads.run_sync(
            lambda: reminders.remind_and_escalate(self.service, self.clock())
        )
