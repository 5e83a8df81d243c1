"""When the background jobs run: expiry sweep, outbox pump, reminders, webhooks.

Thin wiring only: the jobs themselves are in gate.delivery.jobs, idempotent and safe to run on every
replica at once (compare-and-set transitions, leased outbox claims).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from gate.base import threads

log = logging.getLogger(__name__)
SWEEP_JOB = "expiry-sweep"
OUTBOX_JOB = "outbox-pump"
REMIND_JOB = "reminders"
PRUNE_JOB = "decision-log-prune"
WEBHOOK_JOB = "webhook-pump"
#: reminders and escalations are minutes-scale promises; checking every 5 s keeps them
#: punctual without scanning pending requests every second
REMIND_INTERVAL = 5.0


class Scheduler:
    """An AsyncIOScheduler (UTC, in-memory job store) with gate's fixed jobs."""

    def __init__(
        self,
        *,
        sweep: Callable[[], Awaitable[Any]],
        pump: Callable[[], Awaitable[Any]],
        sweep_interval: float,
        pump_interval: float,
        remind: Callable[[], Awaitable[Any]] | None = None,
        remind_interval: float = REMIND_INTERVAL,
        prune: Callable[[], Awaitable[Any]] | None = None,
        prune_interval: float = 300.0,
        webhooks: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._inflight: set[asyncio.Task[Any]] = set()
        # Which jobs are running now, and which were kicked while running: a kick then owes
        # one more run right after this one, instead of being dropped as an overlapping tick
        # (which left a card refresh waiting a whole interval).
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._owed: set[str] = set()
        #: kicked jobs whose start is on its way to the event loop
        self._kicked: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting: set[asyncio.Task[None]] = set()
        sweep, pump = self._tracked(SWEEP_JOB, sweep), self._tracked(OUTBOX_JOB, pump)
        remind = self._tracked(REMIND_JOB, remind) if remind is not None else None
        self._runs = {SWEEP_JOB: sweep, OUTBOX_JOB: pump}
        if remind is not None:
            self._runs[REMIND_JOB] = remind
        # max_instances=1 + coalesce: a slow run is never overlapped by the next tick, and
        # missed ticks collapse into one run instead of a burst.
        common: dict[str, Any] = {"max_instances": 1, "coalesce": True, "misfire_grace_time": None}
        self._scheduler.add_job(sweep, "interval", seconds=sweep_interval, id=SWEEP_JOB, **common)
        self._scheduler.add_job(pump, "interval", seconds=pump_interval, id=OUTBOX_JOB, **common)
        if remind is not None:
            self._scheduler.add_job(
                remind, "interval", seconds=remind_interval, id=REMIND_JOB, **common
            )
        if prune is not None:  # the decision log's retention (`gate.decisions.decision_log`)
            prune = self._tracked(PRUNE_JOB, prune)
            self._runs[PRUNE_JOB] = prune
            self._scheduler.add_job(
                prune, "interval", seconds=prune_interval, id=PRUNE_JOB, **common
            )

        if webhooks is not None:  # `[[webhooks]]` messages, on the card pump's interval
            webhooks = self._tracked(WEBHOOK_JOB, webhooks)
            self._runs[WEBHOOK_JOB] = webhooks
            self._scheduler.add_job(
                webhooks, "interval", seconds=pump_interval, id=WEBHOOK_JOB, **common
            )

    @property
    def running(self) -> bool:
        return bool(self._scheduler.running)

    def start(self) -> None:
        """Start ticking (needs a running event loop)."""
        self._loop = asyncio.get_running_loop()
        self._scheduler.start()

    def shutdown(self) -> None:
        """Stop without waiting for running jobs."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def _tracked(
        self, job_id: str, job: Callable[[], Awaitable[Any]]
    ) -> Callable[[], Awaitable[None]]:
        """Run `job` as a task the scheduler cannot cancel half-way, again at once if it was
        kicked while it ran.

        A job's database work runs in a worker thread that cancellation cannot stop; if
        shutdown cancelled the coroutine and then disposed of the engine, that thread would
        keep a connection the pool no longer knows. Shielded and tracked, every running job
        finishes before `drain()` returns.
        """

        async def run() -> None:
            if not self._scheduler.running:
                return  # a tick dispatched just before the stop: drain() may have returned
            with self._lock:
                if job_id in self._running:  # a tick while a kicked run is on: run again after
                    self._owed.add(job_id)
                    return
                self._running.add(job_id)
            try:
                while True:
                    task = asyncio.ensure_future(job())
                    self._inflight.add(task)
                    task.add_done_callback(self._finished)
                    await asyncio.shield(task)
                    with self._lock:
                        if job_id not in self._owed or not self._scheduler.running:
                            self._owed.discard(job_id)
                            self._running.discard(job_id)
                            return
                        self._owed.discard(job_id)
            except BaseException as exc:
                with self._lock:
                    self._running.discard(job_id)
                    self._owed.discard(job_id)
                if isinstance(exc, asyncio.CancelledError) and not self._scheduler.running:
                    # APScheduler's stop cancels this wait, not the shielded job, which
                    # drain() waits for: nothing failed, and re-raising would have APScheduler
                    # log "Job ... raised an exception" with a traceback on every such stop.
                    return
                raise

        return run

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._inflight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved here too: the awaiting job may have been cancelled

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait for jobs still running after `shutdown()`."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=timeout)

    def kick(self, job_id: str = OUTBOX_JOB) -> None:
        """Run a job now instead of at its next tick (safe from any thread); a job running
        now runs once more as soon as it finishes, however many kicks arrive meanwhile.

        The run is started on the event loop directly, not through APScheduler's job store
        (a modify, a wake-up and a pass over every job for each kick): the outbox pump is
        kicked by every change that owes a card.
        """
        loop = self._loop
        if not self._scheduler.running or loop is None:
            return
        with self._lock:
            if job_id in self._running:
                self._owed.add(job_id)
                return
            if job_id in self._kicked:
                return
            self._kicked.add(job_id)
        # From a change's worker thread, the run starts when the change returns (see
        # `gate.base.threads.soon`); a loop that closed meanwhile has nothing left to run it.
        threads.soon(loop, self._start_kicked, job_id)

    def _start_kicked(self, job_id: str) -> None:
        with self._lock:
            self._kicked.discard(job_id)
        if not self._scheduler.running:
            return
        task = asyncio.ensure_future(self._runs[job_id]())
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
