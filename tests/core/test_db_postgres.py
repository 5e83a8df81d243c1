"""gate's PostgreSQL cursor: a description built only when read, results unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import sqlalchemy as sa

from gate.base.statuses import Verdict
from gate.decisions import deciding
from gate.decisions.service import GateService
from gate.store import rows
from gate.store.db import Database, upgrade
from gate.store.notify_pg import libpq_url
from gate.store.postgres import Cursor, Description
from gate.store.postgres import connect_args as pg_connect_args
from gate.store.records import VOTE_FIELDS
from tests.conftest import GateFactory
from tests.core.conftest import Clock, approver, ask, service_of
from tests.support import config as cfg

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_service(postgres_url: str, clock: Clock) -> Iterator[GateService]:
    svc = service_of(cfg.settings_data(postgres_url), clock)
    yield svc
    svc.db.dispose()


def test_the_engine_hands_out_gates_cursor(postgres_url: str) -> None:
    upgrade(postgres_url)
    db = Database(postgres_url)
    try:
        with db.read_conn() as conn:
            result = conn.execute(rows.SELECT_REQUEST, {"id": "none"})
            assert isinstance(result.context.cursor, Cursor)
    finally:
        db.dispose()


def test_a_statement_run_before_builds_no_columns(pg_service: GateService) -> None:
    rid = ask(pg_service, tool_name="refund", tool_args={"amount": 1})
    deciding.decide(pg_service, rid, approver(pg_service, "alice"), Verdict.approve)
    with pg_service.db.read_conn() as conn:
        for _ in range(2):  # the second run finds SQLAlchemy's cached result metadata
            result = conn.execute(rows.WITH_VOTES, {"id": rid})
            description = result.context.cursor.description
            found = result.all()
        assert isinstance(description, Description)
        assert len(description) == len(rows.REQUEST_COLUMNS) + len(rows.VOTE_FIELDS)
        assert len(description) == len(rows.REQUEST_COLUMNS) + len(VOTE_FIELDS)
        assert description._columns is None  # nobody needed psycopg's Column objects
    # ...and the rows are what they were: the request, its one vote
    assert len(found) == 1 and found[0].id == rid and found[0].vote_approver == "alice"
    view = pg_service.view(rid)
    assert view is not None and view.status == "approved"
    assert [v.approver for v in view.votes] == ["alice"]


def test_a_description_read_is_psycopgs_own(postgres_url: str) -> None:
    upgrade(postgres_url)
    query = "SELECT id, tool_name, created_at, tool_args FROM confirmation_request"
    with psycopg.connect(libpq_url(postgres_url), **pg_connect_args()) as conn:
        ours = conn.cursor()
        ours.execute(query)
        plain = psycopg.Cursor(conn)
        plain.execute(query)
        assert ours.description is not None and plain.description is not None
        assert [tuple(c) for c in ours.description] == [tuple(c) for c in plain.description]
        assert [c.name for c in ours.description] == ["id", "tool_name", "created_at", "tool_args"]
        assert [c.name for c in ours.description[1:3]] == ["tool_name", "created_at"]
        # a statement with no result columns has no description, as with psycopg
        ours.execute("SET application_name = 'gate-test'")
        assert ours.description is None


def test_a_description_read_after_the_cursor_moved_on_is_refused(postgres_url: str) -> None:
    with psycopg.connect(libpq_url(postgres_url), **pg_connect_args()) as conn:
        cur = conn.cursor()
        cur.execute("SELECT 1 AS one")
        first = cur.description
        cur.execute("SELECT 2 AS two, 3 AS three")
        assert first is not None and len(first) == 1
        with pytest.raises(psycopg.InterfaceError):
            list(first)  # it would have described the second result


def test_writes_and_reads_round_trip_on_postgres(pg_service: GateService) -> None:
    rid = ask(pg_service, tool_name="refund", tool_args={"amount": 7})
    with pg_service.db.read_conn() as conn:
        row = conn.execute(rows.SELECT_REQUEST, {"id": rid}).one()._mapping
    assert row["tool_args"] == {"amount": 7} and row["status"] == "pending"
    assert sa.inspect(pg_service.db.engine).dialect.driver == "psycopg"


def _burst(db: Database, calls: int) -> list[int]:
    """`calls` reads of 0.1 s each, all at once; what each returned."""

    def slow_read(n: int) -> int:
        with db.read_conn() as conn:
            return int(conn.execute(sa.text("SELECT :n FROM pg_sleep(0.1)"), {"n": n}).scalar_one())

    with ThreadPoolExecutor(calls) as pool:
        return list(pool.map(slow_read, range(calls)))


def test_a_burst_beyond_the_pool_waits_for_pooled_connections(postgres_url: str) -> None:
    db = Database(postgres_url, pool_size=2)
    opened: list[object] = []
    sa.event.listen(db.engine, "connect", lambda conn, _record: opened.append(conn))
    try:
        for _ in range(2):
            assert _burst(db, 6) == list(range(6))
        # two server processes served all twelve, none opened and closed per call
        assert len(opened) == 2
    finally:
        db.dispose()


def test_overflow_connections_are_opened_when_configured(postgres_url: str) -> None:
    db = Database(postgres_url, pool_size=2, pool_overflow=2)
    opened: list[object] = []
    sa.event.listen(db.engine, "connect", lambda conn, _record: opened.append(conn))
    try:
        assert _burst(db, 6) == list(range(6))
        assert len(opened) == 4
    finally:
        db.dispose()


def test_the_server_builds_its_pool_from_the_settings(
    make_gate: GateFactory, postgres_url: str
) -> None:
    gate = make_gate(database_url=postgres_url, db_pool_size=3)
    pool = gate.state.db.engine.pool
    assert isinstance(pool, sa.QueuePool)
    assert pool.size() == 3
    assert gate.state.settings.server.db_pool_overflow == 0
