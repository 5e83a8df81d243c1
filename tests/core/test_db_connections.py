"""The write path's connections: SQLite's one pinned writer, PostgreSQL's kept spare.

Both skip the pool's checkout per transaction; neither may change what a transaction does,
keep a connection that failed, outlive `dispose`, or leave a read waiting for the pool.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from gate.store.db import Database

COUNTER = sa.table("counter", sa.column("id"), sa.column("n"))
BUMP = sa.update(COUNTER).where(COUNTER.c.id == 1).values(n=COUNTER.c.n + 1)
READ = sa.select(COUNTER.c.n).where(COUNTER.c.id == 1)


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url, pool_size=2)
    with database.write_conn() as conn:
        conn.execute(sa.text("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)"))
        conn.execute(sa.text("INSERT INTO counter VALUES (1, 0)"))
    yield database
    database.dispose()


def _count(db: Database) -> int:
    with db.read_conn() as conn:
        return int(conn.execute(READ).scalar_one())


def _driver(conn: sa.Connection) -> object:
    return conn.connection.driver_connection


def test_writes_reuse_one_connection_and_commit(db: Database) -> None:
    seen = set()
    for _ in range(3):
        with db.write_conn() as conn:
            seen.add(id(_driver(conn)))
            conn.execute(BUMP)
    with db.write() as session:
        seen.add(id(_driver(session.connection())))
        session.execute(BUMP)
    assert len(seen) == 1
    assert _count(db) == 4


def test_an_error_rolls_back_and_keeps_a_healthy_connection(db: Database) -> None:
    with db.write_conn() as conn:
        kept = _driver(conn)
    with pytest.raises(LookupError), db.write() as session:
        session.execute(BUMP)
        raise LookupError("refused by the use case")
    with db.write_conn() as conn:
        assert _driver(conn) is kept
    assert _count(db) == 0


def test_a_connection_that_failed_in_the_database_is_replaced(db: Database) -> None:
    with pytest.raises(sa.exc.DBAPIError), db.write_conn() as conn:
        failed = conn
        conn.execute(BUMP)
        conn.execute(sa.text("SELECT * FROM no_such_table"))
    # closed: its driver connection went back through the pool's reset (or was discarded)
    assert failed.closed
    with db.write_conn() as conn:
        assert conn is not failed
        conn.execute(BUMP)
    assert _count(db) == 1  # the failed transaction's bump was rolled back


def test_dispose_closes_the_write_connection(db: Database) -> None:
    with db.write_conn() as conn:
        before = conn
    db.dispose()
    assert before.closed
    with db.write_conn() as conn:  # the next writer opens a new one
        assert conn is not before
        conn.execute(BUMP)
    assert _count(db) == 1


def test_sqlite_writes_take_the_lock_up_front_and_reads_do_not(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    other = sqlite3.connect(sqlite_url.split("///", 1)[1], timeout=0.05, isolation_level=None)
    try:
        with db.write_conn() as conn:
            conn.execute(sa.text("CREATE TABLE t (n INTEGER)"))
        with db.write_conn():  # no statement yet: BEGIN IMMEDIATE already holds the lock
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        with db.read() as session:
            session.execute(sa.text("SELECT count(*) FROM t"))
            other.execute("BEGIN IMMEDIATE")  # a read's BEGIN is deferred
            other.execute("ROLLBACK")
    finally:
        other.close()
        db.dispose()


def test_sqlite_writers_in_one_process_take_turns(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'turns.db'}")
    with db.write_conn() as conn:
        conn.execute(sa.text("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)"))
        conn.execute(sa.text("INSERT INTO counter VALUES (1, 0)"))

    def bump() -> None:
        for _ in range(20):
            with db.write_conn() as conn:
                n = conn.execute(READ).scalar_one()
                time.sleep(0)  # let another thread try to write in between
                conn.execute(sa.update(COUNTER).values(n=n + 1))

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert _count(db) == 80  # no lost update: one writer at a time
    finally:
        db.dispose()


@pytest.mark.postgres
def test_a_read_never_waits_behind_the_kept_write_connection(postgres_url: str) -> None:
    db = Database(postgres_url, pool_size=1)
    try:
        with db.write_conn() as conn:
            conn.execute(sa.text("SELECT 1"))
        # the pool's only connection is the one kept for writes: the read gets it back
        started = time.monotonic()
        with db.read_conn() as conn:
            assert conn.execute(sa.text("SELECT 2")).scalar_one() == 2
        with db.read() as session:
            assert session.execute(sa.text("SELECT 3")).scalar_one() == 3
        db.ping()
        assert time.monotonic() - started < 5
        with db.write_conn() as conn:
            assert conn.execute(sa.text("SELECT 4")).scalar_one() == 4
    finally:
        db.dispose()


@pytest.mark.postgres
def test_no_connection_is_kept_after_the_pool_invalidated_one(postgres_url: str) -> None:
    db = Database(postgres_url, pool_size=3)
    try:
        with db.write_conn() as conn:
            kept = conn
        with db.read_conn() as conn:  # a restart, as the pool learns of it
            conn.invalidate()
        with db.write_conn() as conn:
            assert conn is not kept
        assert kept.closed
    finally:
        db.dispose()


@pytest.mark.postgres
def test_overlapping_writers_each_keep_their_connection(postgres_url: str) -> None:
    # A decision's transaction and the mark of the card it refreshed overlap: with one
    # connection kept, every other writer went back to the pool (a ROLLBACK round trip).
    db = Database(postgres_url, pool_size=2)
    try:
        with db.write_conn() as first, db.write_conn() as second:
            kept = {_driver(first), _driver(second)}
        with db.write_conn() as first, db.write_conn() as second:
            assert {_driver(first), _driver(second)} == kept
        # both kept connections are the whole pool: a read still gets one at once
        started = time.monotonic()
        with db.read_conn() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
        assert time.monotonic() - started < 5
    finally:
        db.dispose()
