"""Hot statements run on the driver's cursor (`gate.store.direct`): what SQLAlchemy would return.

Every test runs on SQLite and PostgreSQL against a real database: the rows, their types and
row counts must be SQLAlchemy's own, a driver error must surface as SQLAlchemy's exception
(a lost connection invalidated), and anything listening to statement events must see every
statement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from gate.base.statuses import Verdict
from gate.decisions import deciding
from gate.decisions.service import GateService
from gate.inputs.bodies import GateCall
from gate.store import direct, marks, outbox, rows
from gate.store import grants as grant_rows
from gate.store.db import Database
from gate.store.notify_pg import libpq_url
from tests.core.conftest import AGENT, Clock, approver, ask, granted_refund
from tests.support.sql_counter import counting


def _both(conn: sa.Connection, statement: Any, params: dict[str, Any]) -> tuple[list[Any], Any]:
    """(the driver path's rows, SQLAlchemy's rows) for one read."""
    return direct.execute(conn, statement, params).all(), conn.execute(statement, params).all()


def _used_the_driver(statement: Any, db: Database) -> bool:
    cached = direct._cache.get((id(statement), db.engine.dialect.name, None))
    return cached is not None and cached[0] is statement and cached[1] is not direct._UNSUPPORTED


def _carded(service: GateService, clock: Clock) -> str:
    """A request with a card to post on the log channel."""
    request_id = ask(service, tool_name="refund", tool_args={"amount": 1})
    with service.changing() as change:
        outbox.enqueue_posts(change.session, request_id, [("log", "log")], clock.now)
    return request_id


def test_reads_return_sqlalchemys_rows_and_types(service: GateService, clock: Clock) -> None:
    # a wire needs two approvals: one vote leaves it pending, with votes and a chain head
    request_id = ask(service, tool_name="wire", tool_args={"amount": 5, "to": "ACME"})
    deciding.decide(service, request_id, approver(service, "alice"), Verdict.approve, "ok")
    reads: list[tuple[Any, dict[str, Any]]] = [
        (rows.SELECT_REQUEST, {"id": request_id}),
        (rows.LOCK_REQUEST, {"id": request_id}),
        (rows.VOTES_AND_HEAD, {"id": request_id}),
        (rows.WITH_VOTES, {"id": request_id}),
        (rows.SELECT_VOTES, {"id": request_id}),
        (rows.SELECT_REQUEST, {"id": "no-such-request"}),
    ]
    with service.db.write_conn() as conn:
        for statement, params in reads:
            mine, theirs = _both(conn, statement, params)
            assert [tuple(r) for r in mine] == [tuple(r) for r in theirs], statement
            assert [r._mapping for r in mine] == [dict(r._mapping) for r in theirs]
            assert _used_the_driver(statement, service.db)
        (req,) = direct.execute(conn, rows.SELECT_REQUEST, {"id": request_id}).all()
    # what the result processors make of the columns: aware datetimes, parsed JSON
    assert req.created_at.tzinfo is not None and req.created_at.utcoffset().total_seconds() == 0
    assert req.tool_args == {"amount": 5, "to": "ACME"}
    assert isinstance(req.approvals_required, int) and req.approvals_required == 2
    assert req.decided_at is None


def test_writes_report_sqlalchemys_row_count_and_returning_rows(
    service: GateService, clock: Clock
) -> None:
    request_id = _carded(service, clock)
    with service.db.write_conn() as conn:
        card = {"card_request": request_id, "card_channel": "log", "card_target": "log"}
        (post_id,) = conn.execute(
            sa.select(rows.DELIVERY.c.id).where(rows.DELIVERY.c.request_id == request_id)
        ).one()
        # an UPDATE whose SET names the parameters' keys (compiled per set of keys)
        sent = {"row_id": post_id, "status": "sent", "sent_at": clock.now, "claimed_until": None}
        assert direct.execute(conn, marks._SET_ROW, sent).rowcount == 1
        assert direct.execute(conn, marks._SET_ROW, {**sent, "row_id": -1}).rowcount == 0
        ref, status = conn.execute(marks._POST_REF, card).one()
    assert status == "sent" and ref is None


def test_an_update_with_returning_gives_its_computed_columns(
    service: GateService, clock: Clock
) -> None:
    request_id = _carded(service, clock)
    with service.changing() as change:
        outbox.enqueue_updates(change.session, request_id, clock.now)
    with service.db.write_conn() as conn:
        update_id = conn.execute(
            sa.select(sa.func.max(rows.DELIVERY.c.id)).where(
                rows.DELIVERY.c.request_id == request_id
            )
        ).scalar()
        params = {
            "card_request": request_id,
            "card_channel": "log",
            "card_target": "log",
            "row_id": update_id,
            "now": clock.now,
            "ref": "log:x",
            "started": clock.now,
        }
        statement = marks._UPDATE_SENT_CHECKED
        if not service.db.sqlite:  # the same, after taking its turn on the card's post row
            statement = marks._MARKED_ON_CARD
        marked = direct.execute(conn, statement, params).all()
    assert [(r.id, r.overtaken) for r in marked] == [(update_id, False)]
    assert isinstance(marked[0].overtaken, bool)


def test_postgresql_gets_numbered_placeholders_once_per_statement() -> None:
    # a name used twice is one number; an escaped percent sign is a percent sign again
    sql = "SELECT %(a)s, %(b)s, %(a)s WHERE x LIKE 'a%%' AND y = %(c_1)s"
    assert direct.numbered(sql) == (
        "SELECT $1, $2, $1 WHERE x LIKE 'a%' AND y = $3",
        ("a", "b", "c_1"),
    )


def test_a_statement_with_repeated_parameters_and_a_percent_sign_reads_as_sqlalchemys(
    service: GateService,
) -> None:
    statement = sa.select(
        sa.bindparam("n", type_=sa.Integer()) + 1,
        sa.literal_column("'50%'").label("share"),
        sa.bindparam("n", type_=sa.Integer()).label("again"),
    ).where(sa.bindparam("flag", type_=sa.Boolean()))
    with service.db.write_conn() as conn:
        mine, theirs = _both(conn, statement, {"n": 41, "flag": True})
        assert _used_the_driver(statement, service.db)
    assert [tuple(r) for r in mine] == [tuple(r) for r in theirs] == [(42, "50%", 41)]


def test_a_driver_error_is_sqlalchemys_and_the_connection_stays_usable(
    service: GateService, clock: Clock
) -> None:
    request_id = ask(service, tool_name="refund", tool_args={"amount": 1})
    with service.db.write_conn() as conn:
        (row,) = direct.execute(conn, rows.SELECT_REQUEST, {"id": request_id}).all()
    duplicate = {**row._mapping}
    with pytest.raises(sa.exc.IntegrityError), service.db.write_conn() as conn:
        direct.execute(conn, rows.INSERT_REQUEST, duplicate)
    with service.db.write_conn() as conn:
        assert direct.execute(conn, rows.SELECT_REQUEST, {"id": request_id}).first() is not None


def test_a_missing_parameter_is_refused_before_anything_is_sent(service: GateService) -> None:
    with service.db.write_conn() as conn:
        with pytest.raises(sa.exc.InvalidRequestError, match="'id'"):
            direct.execute(conn, rows.SELECT_REQUEST, {})
        # the transaction is untouched
        assert direct.execute(conn, rows.SELECT_REQUEST, {"id": "x"}).first() is None


def test_a_lost_connection_is_invalidated_as_sqlalchemy_would(service: GateService) -> None:
    if service.db.sqlite:
        pytest.skip("a PostgreSQL backend can be killed under its connection")
    with pytest.raises(sa.exc.OperationalError) as raised, service.db.write_conn() as conn:
        (pid,) = conn.execute(sa.text("SELECT pg_backend_pid()")).one()
        with psycopg.connect(libpq_url(service.db.url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        direct.execute(conn, rows.SELECT_REQUEST, {"id": "x"})
    assert raised.value.connection_invalidated
    # the pool hands out a working connection next
    with service.db.write_conn() as conn:
        assert direct.execute(conn, rows.SELECT_REQUEST, {"id": "x"}).first() is None


def test_statement_listeners_see_every_statement(service: GateService, clock: Clock) -> None:
    request_id = ask(service, tool_name="refund", tool_args={"amount": 1})
    with counting(service.db.engine) as tally, service.db.write_conn() as conn:
        direct.execute(conn, rows.VOTES_AND_HEAD, {"id": request_id})
        direct.execute(conn, rows.SELECT_REQUEST, {"id": request_id})
    assert tally.count == 2, str(tally)


def test_expanding_parameters_take_sqlalchemys_path(service: GateService) -> None:
    first = ask(service, tool_name="refund", tool_args={"amount": 1})
    second = ask(service, tool_name="refund", tool_args={"amount": 2})
    by_ids = sa.select(rows.REQUEST.c.id).where(
        rows.REQUEST.c.id.in_(sa.bindparam("ids", expanding=True))
    )
    with service.db.write_conn() as conn:
        found = direct.execute(conn, by_ids, {"ids": [first, second, "x"]}).scalars()
    assert sorted(found) == sorted([first, second])
    assert not _used_the_driver(by_ids, service.db)


def test_grant_lookups_read_through_the_driver(service: GateService) -> None:
    # an agent-scope grant, then a call it covers: allowed by the grant, read on the driver
    granted_refund(service, agent_id="bot")
    allowed = service.submit(
        GateCall(tool_name="refund", tool_args={"amount": 2}, agent_id="bot"), AGENT
    )
    assert allowed.decision.action == "allow"
    assert allowed.view is not None and allowed.view.decided_via == "grant"
    assert _used_the_driver(grant_rows._CANDIDATES, service.db)


def _status_of(conn: sa.Connection) -> str:
    """PostgreSQL: whether the connection is inside a transaction now."""
    driver = conn.connection.driver_connection
    assert driver is not None
    return str(driver.info.transaction_status.name)


def test_the_only_statement_of_a_transaction_commits_by_itself(service: GateService) -> None:
    if service.db.sqlite:
        pytest.skip("SQLite's transaction began with BEGIN IMMEDIATE already")
    request_id = ask(service, tool_name="refund", tool_args={"amount": 1})
    params = {"req_id": request_id, "reason": "nudged"}
    set_reason = sa.update(rows.REQUEST).where(rows.REQUEST.c.id == sa.bindparam("req_id"))
    with service.db.write_conn() as conn:
        assert direct.execute(conn, set_reason, params, last=True).rowcount == 1
        # sent in autocommit: no transaction is open after it, and autocommit is off again
        assert _status_of(conn) == "IDLE"
        assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
    # a transaction that ran a statement before keeps the last one inside it: both go
    with pytest.raises(LookupError), service.db.write_conn() as conn:
        direct.execute(conn, set_reason, {**params, "reason": "first"})
        direct.execute(conn, set_reason, {**params, "reason": "second"}, last=True)
        assert _status_of(conn) == "INTRANS"
        raise LookupError("the caller changed its mind")
    assert service.view(request_id).reason == "nudged"  # type: ignore[union-attr]


def test_an_ask_sends_its_one_statement_without_begin_or_commit(
    service: GateService, tmp_path: Path
) -> None:
    if service.db.sqlite:
        pytest.skip("SQLite's transaction began with BEGIN IMMEDIATE already")
    with service.db.write_conn() as conn:  # the connection kept for the next writer
        driver = conn.connection.driver_connection
    assert driver is not None
    trace = tmp_path / "libpq.trace"
    with trace.open("w") as out:
        driver.pgconn.trace(out.fileno())  # libpq's own log of what goes over the wire
        try:  # a rule that offers no grant: nothing to look up before the write
            request_id = ask(service, tool_name="wire", tool_args={"amount": 1})
        finally:
            driver.pgconn.untrace()
    sent = trace.read_text()
    assert "INSERT INTO confirmation_request" in sent  # the ask ran on this connection
    assert "BEGIN" not in sent and "COMMIT" not in sent, sent[:2000]
    assert service.view(request_id) is not None


def test_a_decision_sends_its_read_and_its_write_without_begin_or_commit(
    service: GateService, tmp_path: Path
) -> None:
    # PostgreSQL: the row is read without its lock and the change is one statement that
    # checks it under the lock (gate.decisions.machine.lock, optimistic), each in autocommit
    if service.db.sqlite:
        pytest.skip("SQLite's transaction began with BEGIN IMMEDIATE already")
    request_id = ask(service, tool_name="refund", tool_args={"amount": 1})
    with service.db.write_conn() as conn:
        driver = conn.connection.driver_connection
    assert driver is not None
    trace = tmp_path / "libpq.trace"
    with trace.open("w") as out:
        driver.pgconn.trace(out.fileno())
        try:
            result = deciding.decide(
                service, request_id, approver(service, "alice"), Verdict.approve
            )
        finally:
            driver.pgconn.untrace()
    sent = trace.read_text()
    assert result.changed
    assert "gate_require" in sent  # the decision ran on this connection, checked
    assert "BEGIN" not in sent and "COMMIT" not in sent, sent[:2000]
