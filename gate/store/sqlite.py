"""SQLite specifics of gate's engine: the one pinned write connection, and its BEGIN.

SQLite lets one transaction write at a time, so this process's writes share one kept
connection (`Pinned`), and each of its transactions begins `BEGIN IMMEDIATE`, taking the
write lock before the first read (`configure`): a deferred transaction that reads and then
writes can fail with "database is locked" when another writer got there first, which would
turn a double click into an error instead of a clean 409. Why that makes a decision's reads
and compare-and-set safe is in `gate.store.decisions` (`_SQLite`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

#: how long a SQLite writer waits for the write lock (`busy_timeout`, and this process's turn)
BUSY_SECONDS = 30


def clean(conn: sa.Connection) -> bool:
    """True when `conn` is open, valid and outside a transaction (safe to lend again)."""
    return not (conn.closed or conn.invalidated or conn.in_transaction())


class Pinned:
    """SQLite's write connection, kept open and lent to one transaction at a time.

    SQLite lets one transaction write at a time anyway (`BEGIN IMMEDIATE` takes the lock up
    front), so a pool of writers only adds a checkout, a `Connection`, event setup and a
    reset per transaction. Writers in this process queue on `_lock` (as long as SQLite's
    `busy_timeout`); other processes (the `gate` CLI) still meet SQLite's own lock. A
    connection whose transaction failed in the database is closed and the next writer
    opens a new one, as the pool would have.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._conn: sa.Connection | None = None
        #: the driver connection under `_conn`, whose transactions begin IMMEDIATE
        self._driver: object = None

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """The connection, in a write transaction committed on success."""
        if not self._lock.acquire(timeout=BUSY_SECONDS):
            # what SQLite says when its own busy_timeout runs out, so callers see one error
            raise sa.exc.OperationalError(
                "BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked")
            )
        try:
            conn = self._conn
            if conn is None:
                conn = self._conn = self._engine.connect()
                self._driver = conn.connection.driver_connection
            try:
                with conn.begin():
                    yield conn
            except BaseException as exc:
                if isinstance(exc, sa.exc.SQLAlchemyError | sqlite3.Error) or not clean(conn):
                    self._drop()
                raise
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close the connection (a writer still using it finishes first, within the wait)."""
        got = self._lock.acquire(timeout=BUSY_SECONDS)
        try:
            self._drop()
        finally:
            if got:
                self._lock.release()

    def holds(self, driver_connection: object) -> bool:
        """True for the driver connection this writer lends (its BEGIN takes the lock)."""
        return driver_connection is self._driver

    def _drop(self) -> None:
        conn, self._conn, self._driver = self._conn, None, None
        if conn is not None:
            with suppress(Exception):  # already broken: closing it is all that is left
                conn.close()


def configure(engine: Engine, writer: Pinned) -> None:
    """Set up `engine`'s SQLite connections: WAL, foreign keys, busy timeout, and
    `BEGIN IMMEDIATE` for the transactions of `writer`'s connection."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin (see `begin` below).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={BUSY_SECONDS * 1000}")
        cur.close()

    def begin(pooled: Any) -> None:
        # PRIVATE (SQLAlchemy): the dialect's own `do_begin` hook, replaced on this engine's
        # dialect. The public alternative is a "begin" event listener (SQLAlchemy's SQLite
        # recipe); measured on a write transaction of one driver statement and one through
        # SQLAlchemy it cost ~10 us more (92 -> 102 us, /tmp benchmark in the store branch's
        # notes), because any engine event makes every SQLAlchemy statement run its event
        # dispatch. Straight to the driver: a statement of its own through SQLAlchemy would
        # cost an execution context. A driver error here is wrapped by SQLAlchemy as any
        # statement's would be. Pinned in pyproject.toml; tests/core/test_library_privates.py
        # fails naming `Dialect.do_begin` if a release changes it.
        pooled.driver_connection.execute(
            "BEGIN IMMEDIATE" if writer.holds(pooled.driver_connection) else "BEGIN"
        )

    # an instance attribute: this engine's dialect only
    engine.dialect.do_begin = begin  # type: ignore[method-assign,assignment]
