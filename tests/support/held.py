"""Making gate slow for real: another connection holds the lock a decision waits for.

A decision reads and writes its request in a write transaction (SQLite: `BEGIN IMMEDIATE`,
the database's one write lock). On PostgreSQL it first reads the row without locking it and
writes with a check (`gate.decisions.machine.lock`, optimistic), so a row lock would hold up only
its write, and a refusal, which writes nothing, not at all: the requests table is locked whole
(`ACCESS EXCLUSIVE`, which even a plain read waits for). Holding that lock from another
connection makes the decision wait as it would behind a busy database, with no part of gate
replaced.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from gate.store.db import is_sqlite, normalise_url

# The most a lock is held if a test never leaves its block (a hung test must not hang the run).
_LONGEST_HOLD = 60.0


@contextmanager
def requests_locked(database_url: str) -> Iterator[None]:
    """Inside the block, a decision waits (on PostgreSQL so does every other read of a
    request); leaving the block lets the lock go, so what waited goes on.

    The lock is held until the block ends, not for a number of seconds: on a loaded machine a
    fixed hold could end before the code under test even began waiting, and what the block
    asserts about "while it waits" would then race the release.
    """
    engine = sa.create_engine(normalise_url(database_url))
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        with engine.connect() as conn:
            if is_sqlite(database_url):
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                conn.exec_driver_sql("LOCK TABLE confirmation_request IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(_LONGEST_HOLD)
            conn.rollback()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert locked.wait(10), "the lock was not taken"
        yield
    finally:
        release.set()
        holder.join(10)
        engine.dispose()
