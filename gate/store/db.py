"""Engine, sessions and migrations. Built by `create_app`, never at import time."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session

from gate.base.errors import ConfigError
from gate.base.resources import resource_path
from gate.config.connections import check_database_url
from gate.store import sqlite
from gate.store.sqlite import BUSY_SECONDS, Pinned, clean

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

log = logging.getLogger(__name__)
#: where the database is configured, for messages
DATABASE_KEY = "server.database_url"


def normalise_url(url: str) -> str:
    """Map plain `postgresql://` URLs to the psycopg 3 driver gate ships with."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def is_sqlite(url: str) -> bool:
    """True for SQLite URLs."""
    return url.startswith("sqlite")


class Database:
    """One engine and the two kinds of session gate uses.

    `write()` opens a transaction meant to change rows. On SQLite it starts with
    `BEGIN IMMEDIATE`, taking the write lock up front: a deferred transaction that reads and
    then writes can fail with "database is locked" when another writer got there first,
    which would turn a double click into an error instead of a clean 409.

    SQLite allows one writer at a time, so this process's writes share one pinned connection
    (`Pinned`) instead of checking one out of the pool per transaction.
    """

    def __init__(self, url: str, *, pool_size: int = 8, pool_overflow: int = 0) -> None:
        check_openable(url)
        self.url = normalise_url(url)
        self.sqlite = is_sqlite(self.url)
        kwargs: dict[str, Any] = {}
        if self.sqlite:
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": BUSY_SECONDS}
        else:
            # No pre-ping: it costs every checkout a round trip. After a database restart
            # the first statement on a dead connection fails instead, and SQLAlchemy then
            # invalidates every connection pooled before it, so one request sees the error.
            # No overflow by default: an overflow connection is closed when returned to a
            # full pool, so a steady load above `pool_size` opened a new server process every
            # few calls (0.1 per ask at concurrency 32); waiting for a pooled one is cheaper,
            # and fewer busy backends also leave the two cores to gate.
            kwargs.update(pool_size=pool_size, max_overflow=pool_overflow)
            from gate.store import postgres  # psycopg is installed only with PostgreSQL

            kwargs["connect_args"] = postgres.connect_args()
        kwargs["json_deserializer"] = stored_json
        self.engine: Engine = sa.create_engine(self.url, **kwargs)
        #: webhook name -> the events it wants (`[[webhooks]]`, set by the app): each write
        #: session carries them, so an audit event owes its messages in its own transaction
        self.webhooks: dict[str, frozenset[str]] = {}
        self._pinned: Pinned | None = None
        self._spare: _Spare | None = None
        if self.sqlite:
            self._pinned = Pinned(self.engine)
            sqlite.configure(self.engine, self._pinned)
        else:
            self._spare = _Spare(self.engine, pool_overflow)
        # PostgreSQL: a read of one statement is a snapshot by itself, so it runs without
        # BEGIN and ROLLBACK (two round trips fewer). SQLite's BEGIN costs no I/O.
        self._reader = (
            self.engine
            if self.sqlite
            else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        )

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; rolled back on exit."""
        with self._reading(), Session(self.engine, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session whose transaction commits on success and rolls back on error."""
        # The session joins the write connection's transaction: it flushes into it, and the
        # commit (or the rollback on error) is the connection's.
        with (
            self.write_conn() as conn,
            Session(conn, expire_on_commit=False, join_transaction_mode="rollback_only") as session,
        ):
            if self.webhooks:
                session.info["gate_webhooks"] = self.webhooks  # gate.store.webhooks.SUBSCRIPTIONS
            yield session
            session.flush()

    @contextmanager
    def write_conn(self) -> Iterator[sa.Connection]:
        """`write()` without the ORM: a connection in a write transaction, for code that
        runs Core statements only (the outbox pump)."""
        writer = self._pinned or self._spare
        assert writer is not None
        with writer.begin() as conn:
            yield conn

    @contextmanager
    def read_conn(self) -> Iterator[sa.Connection]:
        """A connection for reads of one statement each (autocommit on PostgreSQL)."""
        with self._reading(), self._reader.connect() as conn:
            yield conn

    def _reading(self) -> AbstractContextManager[object]:
        return self._spare.reading() if self._spare is not None else nullcontext()

    def dispose(self) -> None:
        """Close every pooled connection (and SQLite's pinned write connection)."""
        if self._pinned is not None:
            self._pinned.close()
        if self._spare is not None:
            self._spare.close()
        self.engine.dispose()

    def ping(self) -> None:
        """Run `SELECT 1`; raises when the database is unreachable."""
        with self._reading(), self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def check_reachable(self) -> None:
        """`ping`, with a failure raised as a ConfigError naming why (for start-up)."""
        try:
            self.ping()
        except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
            raise _unopenable(exc) from None


class _Spare:
    """PostgreSQL: the last write transactions' connections, kept for the next ones.

    Checking a connection out of the pool and back costs a `Connection`, event setup and a
    reset (a ROLLBACK round trip) per transaction; the next writer takes a kept one instead,
    the most recently used first. Up to `KEPT` are kept: a decision's transaction and the
    mark of the card it refreshed overlap, so with one kept every other writer missed. Each
    stays one of the pool's connections, so none is kept while a read waits for the pool: a
    read that finds the pool empty has them given back first, and none is kept while a read
    is checking one out. After the pool invalidated a connection (a database restart) none
    kept before is reused.
    """

    KEPT = 4

    def __init__(self, engine: Engine, overflow: int) -> None:
        # PostgreSQL engines get a QueuePool (SQLAlchemy's default for a server database)
        self._pool = cast(sa.QueuePool, engine.pool)
        self._engine = engine
        self._overflow = overflow
        self._lock = threading.Lock()
        self._idle: list[sa.Connection] = []
        self._reads = 0  # reads checking a connection out of the pool right now
        self._generation = 0  # bumped each time the pool invalidates a connection
        self._kept_at = 0  # the generation of the connections kept
        event.listen(engine, "invalidate", self._invalidated)
        event.listen(engine, "soft_invalidate", self._invalidated)

    @contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        """A connection in a write transaction committed on success."""
        conn = None
        stale: list[sa.Connection] = []
        with self._lock:
            if self._kept_at != self._generation:
                stale, self._idle = self._idle, []
            elif self._idle:
                conn = self._idle.pop()
        for old in stale:
            self._close(old)
        if conn is None:
            conn = self._engine.connect()
        try:
            with conn.begin():
                yield conn
        except BaseException as exc:
            if isinstance(exc, sa.exc.SQLAlchemyError) or not clean(conn):
                self._close(conn)
                raise
            self._keep(conn)
            raise
        self._keep(conn)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around a read's checkout: the kept connections go back first if the pool has
        no other, and none is kept until the read has one."""
        with self._lock:
            self._reads += 1
            idle: list[sa.Connection] = []
            if self._pool.checkedin() == 0 and self._pool.overflow() >= self._overflow:
                idle, self._idle = self._idle, []
        try:
            for conn in idle:
                self._close(conn)
            yield
        finally:
            with self._lock:
                self._reads -= 1

    def close(self) -> None:
        """Give the kept connections back to the pool."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            self._close(conn)

    def _keep(self, conn: sa.Connection) -> None:
        stale: list[sa.Connection] = []
        with self._lock:
            if self._kept_at != self._generation:  # none kept before an invalidation is reused
                stale, self._idle = self._idle, []
                self._kept_at = self._generation
            kept = len(self._idle) < self.KEPT and self._reads == 0 and clean(conn)
            if kept:
                self._idle.append(conn)
        for old in stale:
            self._close(old)
        if not kept:
            self._close(conn)

    def _invalidated(self, *_args: object) -> None:
        self._generation += 1

    @staticmethod
    def _close(conn: sa.Connection) -> None:
        with suppress(Exception):  # already broken: closing it is all that is left
            conn.close()


#: a JSON escape of a UTF-16 surrogate; a pair decodes to one character, a lone one does not
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")  # psycopg hands bytes over
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def stored_json(text: str | bytes) -> Any:
    """A JSON column's value as read: lone surrogates (rows stored before input was checked,
    or another writer's) become U+FFFD, which every surface can encode and hash; gate's own
    writes hold none, and the search that finds none is all they cost."""
    value = json.loads(text)
    found = (
        _SURROGATE_ESCAPE_BYTES.search(text)
        if isinstance(text, bytes)
        else _SURROGATE_ESCAPE.search(text)
    )
    if found is None:
        return value
    return _mend(value)


def _mend(value: Any) -> Any:
    """`value` with every lone surrogate, in keys and strings, made U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_mend(v) for v in value]
    if isinstance(value, dict):
        return {_mend(k): _mend(v) for k, v in value.items()}
    return value


#: the newest migration's revision (tests/store/test_schema.py checks it against migrations/): a
#: database already there is not handed to Alembic at all, whose import and reading of every
#: migration script cost a replica's start about a quarter of a second of CPU
HEAD_REVISION = "0020"


def alembic_config(url: str) -> AlembicConfig:
    """An Alembic config whose script location is found from the installed package."""
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(resource_path("migrations")))
    cfg.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    cfg.attributes["configure_logger"] = False
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply migrations up to `revision`; ConfigError when the database cannot be opened."""
    check_openable(url)
    try:
        if revision == "head" and stored_revision(url) == HEAD_REVISION:
            return
        from alembic import command

        command.upgrade(alembic_config(url), revision)
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise _unopenable(exc) from None


def stored_revision(url: str) -> str | None:
    """The migration revision the database at `url` is at; None for one gate never migrated
    (a new SQLite file, an empty PostgreSQL database)."""
    engine = sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("alembic_version"):
                return None
            found = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            return str(found) if found is not None else None
    finally:
        engine.dispose()


def _unopenable(exc: sa.exc.DBAPIError) -> ConfigError:
    # Refused connection, unknown host, bad password, unwritable file: the driver's first
    # line says which (it never holds the password).
    reason = str(exc.orig or exc).strip().splitlines()[0][:300]
    return ConfigError(f"cannot open the database: {reason}", key=DATABASE_KEY)


def check_openable(url: str) -> None:
    """ConfigError when `url` cannot be a database gate opens: an unsupported scheme, or a
    SQLite file in a folder that does not exist (SQLite creates the file, never the folder).
    """
    try:
        check_database_url(url)
    except ValueError as exc:
        raise ConfigError(str(exc), key=DATABASE_KEY) from None
    path = sqlite_path(url)
    if path is not None and not path.parent.is_dir():
        raise ConfigError(
            f"the folder {str(path.parent.absolute())!r} for the SQLite file does not exist; "
            "create it or point database_url elsewhere",
            key=DATABASE_KEY,
        )


def existing_schema(url: str) -> None:
    """ConfigError unless `url` is a database gate's migrations made, opened without
    changing anything (a command that only reads, `gate audit verify`): a SQLite file that is
    not there (opening it would create an empty one), an unreachable server, or a database
    with no gate tables (the wrong one, or never served) is named instead."""
    check_openable(url)
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise ConfigError(
            f"no SQLite file at {str(path.absolute())!r}: point database_url at the one "
            "`gate serve` uses",
            key=DATABASE_KEY,
        )
    try:
        present = stored_revision(url) is not None
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        raise _unopenable(exc) from None
    if not present:
        raise ConfigError(
            "the database holds no gate tables: `gate serve` (or `gate db upgrade`) creates "
            "them; is database_url the database gate uses?",
            key=DATABASE_KEY,
        )


def read_only_engine(url: str) -> Engine:
    """An engine that cannot write (`gate policy replay`): SQLite opened `mode=ro`,
    PostgreSQL with every transaction read-only. Check `existing_schema(url)` first."""
    url = normalise_url(url)
    path = sqlite_path(url)
    kwargs: dict[str, Any] = {"poolclass": sa.pool.NullPool, "json_deserializer": stored_json}
    if path is not None:
        import sqlite3

        target = f"file:{path.absolute()}?mode=ro"
        return sa.create_engine(
            "sqlite://", creator=lambda: sqlite3.connect(target, uri=True), **kwargs
        )
    from gate.store import postgres

    args = {**postgres.connect_args(), "options": "-c default_transaction_read_only=on"}
    return sa.create_engine(url, connect_args=args, **kwargs)


def sqlite_path(url: str) -> Path | None:
    """The file behind a SQLite URL (None for in-memory)."""
    if not is_sqlite(url):
        return None
    rest = url.split("///", 1)[1] if "///" in url else ""
    rest = rest.split("?", 1)[0]  # driver options (?timeout=..., ?mode=ro) are not the path
    return Path(rest) if rest and rest != ":memory:" else None
