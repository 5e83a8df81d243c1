"""The suite's reused PostgreSQL databases isolate tests as well as new ones did
(tests/support/pg_databases.py): what one test wrote, changed or kept open is gone for the next."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa

from gate.store.db import normalise_url
from tests.conftest import GateFactory, _stop_servers
from tests.support import config as cfg
from tests.support.pg_databases import PostgresDatabases

pytestmark = pytest.mark.postgres


@pytest.fixture
def databases(postgres_databases: PostgresDatabases) -> Iterator[PostgresDatabases]:
    """A pool of its own on this process's template, so the counts below are this test's."""
    own = PostgresDatabases(str(postgres_databases.admin_url), postgres_databases.template)
    yield own
    own.close()


def _rows(url: str, query: str) -> list[tuple[object, ...]]:
    engine = sa.create_engine(normalise_url(url))
    try:
        with engine.begin() as conn:
            return [tuple(row) for row in conn.execute(sa.text(query))]
    finally:
        engine.dispose()


def _write(url: str, *statements: str) -> None:
    engine = sa.create_engine(normalise_url(url))
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


_TABLES = (
    "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
    "AND relkind = 'r' AND relname <> 'alembic_version'"
)


def _counts(url: str) -> dict[str, int]:
    counts = {}
    for (table,) in _rows(url, _TABLES):
        counts[str(table)] = int(_rows(url, f'SELECT count(*) FROM "{table}"')[0][0])
    return counts


def test_a_database_comes_back_empty_with_its_sequences_restarted(
    databases: PostgresDatabases, make_gate: GateFactory
) -> None:
    first = databases.lend()
    url = databases.url(first)
    assert set(_counts(url).values()) == {0}
    # a real gate writes what a test would: a request, its votes and audit chain, a decision
    # log, deliveries
    gate = make_gate(database_url=url)
    asked = gate.submit(tool_name="pay_vendor", tool_args={"amount": 90000})
    assert gate.decide(asked["request"]["id"], cfg.ALICE).status_code == 200
    gate.submit(tool_name="read_file", tool_args={"path": "/a"})
    _stop_servers()
    written = {table for table, count in _counts(url).items() if count}
    assert {"confirmation_request", "vote", "audit_event", "decision_log"} <= written
    databases.give_back(first)
    assert databases.reused == 0

    second = databases.lend()
    assert second != first
    assert databases.reused == 1, "the database was not reused"
    again = databases.url(second)
    assert set(_counts(again).values()) == {0}
    assert _rows(again, "SELECT nextval('audit_event_id_seq')") == [(1,)]
    assert _rows(again, "SELECT version_num FROM alembic_version") == _rows(
        databases.url(databases.template), "SELECT version_num FROM alembic_version"
    )
    databases.give_back(second)


def test_a_changed_schema_is_dropped_not_reused(databases: PostgresDatabases) -> None:
    for change in (
        "ALTER TABLE vote ADD COLUMN extra integer",
        "CREATE INDEX extra ON audit_event (id)",
        "ALTER TABLE confirmation_request ALTER COLUMN status DROP NOT NULL",
        "UPDATE alembic_version SET version_num = '0001'",
        "DROP TABLE alembic_version",
        "CREATE TABLE leftover (id integer)",
        "CREATE OR REPLACE FUNCTION gate_require(ok boolean, message text) RETURNS boolean "
        "LANGUAGE sql AS 'SELECT true'",
    ):
        name = databases.lend()
        _write(databases.url(name), change)
        discarded = databases.discarded
        databases.give_back(name)
        assert databases.discarded == discarded + 1, f"reused after {change!r}"
        assert name not in _database_names(databases)


def test_a_lent_database_is_not_reachable_by_its_last_name(databases: PostgresDatabases) -> None:
    """A server a test left behind cannot reach the next test's data through its old URL."""
    first = databases.lend()
    old_url = databases.url(first)
    engine = sa.create_engine(normalise_url(old_url))
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
    # the connection is still open in the engine's pool: give_back ends it
    databases.give_back(first)
    second = databases.lend()
    assert second != first
    with pytest.raises(sa.exc.OperationalError, match="terminating connection"):
        with engine.connect() as conn:  # the connection it held was ended
            conn.execute(sa.text("SELECT 1"))
    with pytest.raises(sa.exc.OperationalError, match="does not exist"):
        with engine.connect() as conn:  # and a new one finds no such database
            conn.execute(sa.text("SELECT 1"))
    engine.dispose()
    databases.give_back(second)


def _database_names(databases: PostgresDatabases) -> set[str]:
    with psycopg.connect(
        databases.admin_url.set(drivername="postgresql").render_as_string(hide_password=False)
    ) as conn:
        return {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
