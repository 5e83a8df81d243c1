"""Cross-replica wake-ups on PostgreSQL: NOTIFY inside the deciding transaction, LISTEN here.

`stage()` runs `pg_notify` in the transaction that changes a request, so PostgreSQL sends the
notification if and only if that transaction commits. Each replica keeps one dedicated
autocommit connection that LISTENs and turns every notification into a local wake-up. When
that connection drops it reconnects with backoff, and after every (re)connect wakes every
local waiter: waiters re-read the database, so a notification lost during the gap costs one
read per waiter, never a missed verdict. `GateService.wait` also re-reads every ~10 s as the
last safety net.

Every replica hears every change of every replica, so hearing one is kept cheap: the
connection is a plain psycopg one whose socket the event loop watches (`add_reader`), and a
readable socket is drained with libpq's own calls (`consume_input`, `notifies`): ~18 us of
CPU per notification here, against ~51 us through psycopg's async `notifies()` generator (a
future, a reader added and removed, and a generator step per notification). A replica also
hears its own changes, which it published locally right after their commit: those are
recognised by the backend that sent them (one of this replica's pooled connections) and
dropped, so a change with waiters is not read from the database a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import pq
from sqlalchemy import event

from gate.base import threads
from gate.base.notify import Event, Notifier
from gate.store import batch

log = logging.getLogger(__name__)

CHANNEL = "gate_events"
#: how the listening connection names itself in pg_stat_activity (operators and tests find it)
APPLICATION_NAME = "gate-listener"
#: reconnect backoff: first retry almost at once (a terminated backend is usually a blip),
#: doubling to a cap short enough that a recovered database is noticed within seconds
BACKOFF_START = 0.05
BACKOFF_CAP = 5.0
#: how long one attempt to open the LISTEN connection may take
CONNECT_SECONDS = 10
_NOTIFY = sa.select(sa.func.pg_notify(sa.bindparam("channel"), sa.bindparam("payload")))


def libpq_url(sqlalchemy_url: str) -> str:
    """`postgresql+psycopg://...` (SQLAlchemy) -> `postgresql://...` (libpq / psycopg)."""
    url = sa.make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


class PostgresNotifier(Notifier):
    """In-process wake-ups plus LISTEN/NOTIFY so a decision on any replica wakes them all."""

    def __init__(self, url: str, engine: sa.Engine | None = None) -> None:
        super().__init__()
        self._conninfo = libpq_url(url)
        #: server process ids of this replica's pooled connections (`engine`'s), by driver
        #: connection: what they NOTIFY was published here already (`GateService.changing`)
        self._own_by_connection: dict[int, int] = {}
        self._own: set[int] = set()
        if engine is not None:
            event.listen(engine, "connect", self._opened)
            for ended in ("close", "close_detached", "invalidate", "soft_invalidate"):
                event.listen(engine, ended, self._ended)
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.Connection[Any] | None = None
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
                        conn.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP)

    async def _listen_once(self) -> None:
        loop = asyncio.get_running_loop()
        connecting = asyncio.ensure_future(threads.run_sync(self._connect))
        try:
            conn = await asyncio.shield(connecting)
        except asyncio.CancelledError:  # stopped meanwhile: close what the thread opens
            connecting.add_done_callback(_close_opened)
            raise
        self._conn = conn
        self.connects += 1
        self.listening.set()
        if self.connects > 1:
            log.info("LISTEN connection restored; waking every waiter to re-read")
            # A gap can mean the database restarted and reused process ids: forget them all
            # (connections opened from now on are learnt again; older ones are heard twice).
            self._own.clear()
            self._own_by_connection.clear()
        # Anything committed while we were not listening was not delivered: every waiter
        # re-reads the database once (cheap, and correct whatever was missed).
        self.wake_all()
        lost: asyncio.Future[None] = loop.create_future()
        socket = conn.fileno()
        loop.add_reader(socket, self._drain, conn.pgconn, lost)
        try:
            await lost  # raises with why the connection ended
        finally:
            loop.remove_reader(socket)

    def _connect(self) -> psycopg.Connection[Any]:
        """A new autocommit connection LISTENing on `CHANNEL` (blocking: a worker thread)."""
        conn = psycopg.connect(
            self._conninfo,
            autocommit=True,
            application_name=APPLICATION_NAME,
            # bounded: a blocking connect to an unreachable host would otherwise hold its
            # worker thread (and the process's exit, which waits for it) for the OS's TCP
            # timeout; the reconnect loop simply tries again
            connect_timeout=CONNECT_SECONDS,
        )
        try:
            conn.execute(f"LISTEN {CHANNEL}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _drain(self, pgconn: pq.abc.PGconn, lost: asyncio.Future[None]) -> None:
        """The socket is readable: deliver every notification that came, or end the wait
        on `lost` when the connection broke."""
        try:
            pgconn.consume_input()
            if pgconn.status != pq.ConnStatus.OK:
                raise psycopg.OperationalError("the LISTEN connection was closed by the server")
            while (notify := pgconn.notifies()) is not None:
                if notify.be_pid in self._own:
                    continue  # this replica's own change, published at its commit
                kind, _, request_id = notify.extra.decode().partition(":")
                if request_id:
                    self._deliver(Event(kind, request_id))
        except Exception as exc:  # the connection is gone: `_listen_forever` reconnects
            if not lost.done():
                lost.set_exception(exc)

    def _opened(self, driver_connection: Any, *_: Any) -> None:
        """A pooled connection opened (any thread): its notifications are this replica's."""
        pid = driver_connection.info.backend_pid
        self._own_by_connection[id(driver_connection)] = pid
        self._own.add(pid)

    def _ended(self, driver_connection: Any, *_: Any) -> None:
        """A pooled connection closed or broke: its process id may be another's later."""
        pid = self._own_by_connection.pop(id(driver_connection), None)
        if pid is not None:
            self._own.discard(pid)


def _close_opened(opening: asyncio.Future[psycopg.Connection[Any]]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()
