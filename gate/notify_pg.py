"""Cross-replica wake-ups on PostgreSQL: NOTIFY inside the deciding transaction, LISTEN here.

`stage()` runs `pg_notify` in the transaction that changes a request, so PostgreSQL sends the
notification if and only if that transaction commits. Each replica keeps one dedicated
autocommit connection (psycopg 3, async) that LISTENs and turns every notification into a
local wake-up. When that connection drops it reconnects with backoff, and after every
(re)connect wakes every local waiter: waiters re-read the database, so a notification lost
during the gap costs one read per waiter, never a missed verdict. `GateService.wait` also
re-reads every ~10 s as the last safety net.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg
import sqlalchemy as sa

from gate import batch
from gate.notify import Event, Notifier

log = logging.getLogger(__name__)

CHANNEL = "gate_events"
#: how the listening connection names itself in pg_stat_activity (operators and tests find it)
APPLICATION_NAME = "gate-listener"
#: reconnect backoff: first retry almost at once (a terminated backend is usually a blip),
#: doubling to a cap short enough that a recovered database is noticed within seconds
BACKOFF_START = 0.05
BACKOFF_CAP = 5.0
_NOTIFY = sa.select(sa.func.pg_notify(sa.bindparam("channel"), sa.bindparam("payload")))


def libpq_url(sqlalchemy_url: str) -> str:
    """`postgresql+psycopg://...` (SQLAlchemy) -> `postgresql://...` (libpq / psycopg)."""
    url = sa.make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class PostgresNotifier(Notifier):
    """In-process wake-ups plus LISTEN/NOTIFY so a decision on any replica wakes them all."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._conninfo = libpq_url(url)
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        #: set while the LISTEN connection is up; tests and /readyz-style checks read it
        self.listening = asyncio.Event()
        #: how many times the listener (re)connected, for logs, metrics and tests
        self.connects = 0

    async def start(self) -> None:
        """Bind to the loop and start listening (in the background: start-up never blocks)."""
        await super().start()
        self.listening = asyncio.Event()
        self._task = asyncio.create_task(self._listen_forever(), name="gate-pg-listener")

    async def stop(self) -> None:
        """Stop listening and end live streams."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await super().stop()

    @property
    def backend_pid(self) -> int | None:
        """The server process id of the LISTEN connection, while it is up."""
        conn = self._conn
        return conn.info.backend_pid if conn is not None and self.listening.is_set() else None

    def stage(self, session: Any, event: Event) -> None:
        """Queue a NOTIFY in the caller's transaction (with its batch): sent iff it commits."""
        batch.write(
            session, _NOTIFY, {"channel": CHANNEL, "payload": f"{event.kind}:{event.request_id}"}
        )

    async def _listen_forever(self) -> None:
        delay = BACKOFF_START
        while True:
            connects = self.connects
            try:
                await self._listen_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any driver error: reconnect, never die
                if self.connects > connects:  # it was up: start the backoff over
                    delay = BACKOFF_START
                log.warning(
                    "LISTEN connection lost (%s: %s); reconnecting in %.2f s",
                    type(exc).__name__,
                    exc,
                    delay,
                )
            finally:
                self.listening.clear()
                conn, self._conn = self._conn, None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP)

    async def _listen_once(self) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, application_name=APPLICATION_NAME
        )
        self._conn = conn
        await conn.execute(f"LISTEN {CHANNEL}")
        self.connects += 1
        self.listening.set()
        if self.connects > 1:
            log.info("LISTEN connection restored; waking every waiter to re-read")
        # Anything committed while we were not listening was not delivered: every waiter
        # re-reads the database once (cheap, and correct whatever was missed).
        self.wake_all()
        async for notify in conn.notifies():
            kind, _, request_id = notify.payload.partition(":")
            if request_id:
                self._deliver(Event(kind, request_id))
