"""History-aware conditions (issue 32, item 8): `history.count` / `history.sum` and their session
variants over the calls gate let through or is asking about, keyed on the token, on SQLite and
PostgreSQL: which calls count, fail closed, the index each read runs on, and the statements a
call sends (none more for a policy without history)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import sqlalchemy as sa

from gate.base.statuses import Verdict
from gate.decisions import deciding, history
from gate.decisions.service import GateService, Submitted
from gate.identity.auth import Principal
from gate.inputs.bodies import GateCall
from gate.store import counted
from gate.store.db import Database
from tests.core.conftest import AGENT, OTHER_AGENT, Clock, approver, service_of
from tests.support import config as cfg
from tests.support.sql_counter import counting, per_database

#: a budget: payments run on their own until the day's total would pass 1000, then a person
#: is asked; a fourth deploy within an hour is denied; a session may export twice
HISTORY_RULES: list[dict[str, Any]] = [
    {
        "name": "daily-budget",
        "tools": ["pay_*"],
        "when": 'history.sum("pay_*", "amount", "24h") + args.amount > 1000',
        "approvers": ["group:finance"],
        "timeout": "10m",
    },
    {"name": "small-payments", "tools": ["pay_*"], "action": "allow"},
    {
        "name": "deploy-rate",
        "tools": ["deploy_*"],
        "when": 'history.count("deploy_*", "1h") >= 3',
        "action": "deny",
    },
    {"name": "deploys", "tools": ["deploy_*"], "action": "allow"},
    {
        "name": "session-exports",
        "tools": ["export"],
        "when": 'history.session_count("export", "1h") >= 2',
        "approvers": ["group:finance"],
        "timeout": "10m",
    },
    {"name": "exports", "tools": ["export"], "action": "allow"},
]


def _service(db_url: str, clock: Clock, rules: list[dict[str, Any]]) -> GateService:
    data = cfg.settings_data(db_url)
    data["rules"] = [*rules, *data["rules"]]
    return service_of(data, clock)


@pytest.fixture
def counting_service(db_url: str, clock: Clock) -> Iterator[GateService]:
    svc = _service(db_url, clock, HISTORY_RULES)
    yield svc
    svc.db.dispose()


def call(svc: GateService, principal: Principal = AGENT, **body: Any) -> Submitted:
    return svc.submit(GateCall(**body), principal)


def pay(svc: GateService, amount: int, principal: Principal = AGENT, **body: Any) -> Submitted:
    return call(svc, principal, tool_name="pay_card", tool_args={"amount": amount}, **body)


def decide(svc: GateService, submitted: Submitted, verdict: Verdict) -> None:
    assert submitted.view is not None
    reason = "over budget" if verdict is Verdict.reject else None
    decided = deciding.decide(svc, submitted.view.id, approver(svc, "alice"), verdict, reason)
    assert decided.changed, decided


def test_a_sum_counts_allowed_and_in_flight_calls_not_rejected_ones(
    counting_service: GateService, clock: Clock
) -> None:
    svc = counting_service
    assert pay(svc, 600).decision.action == "allow"
    # 600 + 500 > 1000: asked, and pending it counts (in flight)
    asked = pay(svc, 500)
    assert (asked.decision.action, asked.decision.rule and asked.decision.rule.name) == (
        "ask",
        "daily-budget",
    )
    assert asked.decision.history == (('history.sum("pay_*", "amount", "24h")', 600),)
    # what it matched on is said with its reason: to the agent, on the request and its cards
    assert asked.view is not None
    assert asked.view.reason == (
        'Rule \'daily-budget\' needs a human decision (history.sum("pay_*", "amount", "24h") = 600)'
    )
    assert pay(svc, 1).decision.history == (('history.sum("pay_*", "amount", "24h")', 1100),)
    # rejected: no money was spent, so it stops counting (the asked 1 is pending: 601 so far)
    decide(svc, asked, Verdict.reject)
    assert pay(svc, 300).decision.history == (('history.sum("pay_*", "amount", "24h")', 601),)
    # approved: it counts
    big = pay(svc, 5000)
    decide(svc, big, Verdict.approve)
    assert pay(svc, 1).decision.history[0][1] == 601 + 300 + 5000
    # a variant of the name is the same tool; out of the window nothing counts
    assert call(svc, tool_name="PAY_card", tool_args={"amount": 1}).decision.action == "ask"
    clock.advance(hours=24, seconds=1)
    fresh = pay(svc, 10)
    assert (fresh.decision.action, fresh.decision.history[0][1]) == ("allow", 0)


def test_the_count_keys_on_the_token_not_the_agent_id(counting_service: GateService) -> None:
    svc = counting_service
    for n in range(3):  # three deploys, each naming itself anew
        assert call(svc, tool_name="deploy_web", agent_id=f"bot-{n}").decision.action == "allow"
    fourth = call(svc, tool_name="deploy_api", agent_id="someone-else")
    assert fourth.decision.action == "deny"
    assert fourth.decision.history == (('history.count("deploy_*", "1h")', 3),)
    # another token has its own count; a denied call adds nothing to it
    assert call(svc, OTHER_AGENT, tool_name="deploy_web").decision.action == "allow"
    assert call(svc, tool_name="deploy_web").decision.history[0][1] == 3


def test_a_session_count_and_a_call_without_a_session(counting_service: GateService) -> None:
    svc = counting_service
    for _ in range(2):
        assert call(svc, tool_name="export", session_id="s1").decision.action == "allow"
    assert call(svc, tool_name="export", session_id="s1").decision.action == "ask"
    assert call(svc, tool_name="export", session_id="s2").decision.action == "allow"
    # the same session id from another token is another session
    assert call(svc, OTHER_AGENT, tool_name="export", session_id="s1").decision.action == "allow"
    # no session to count in: the ask rule matches (fail closed), saying why on the request
    unnamed = call(svc, tool_name="export")
    assert unnamed.decision.action == "ask" and unnamed.view is not None
    error = unnamed.view.offers.condition_error or ""
    assert "could not read the call history (the call names no session_id" in error


def test_an_unreachable_database_fails_closed(tmp_path: Any, clock: Clock) -> None:
    svc = _service(f"sqlite:///{tmp_path}/gate.db", clock, HISTORY_RULES)
    try:
        svc.db.dispose()
        svc.db = Database("postgresql://gate@127.0.0.1:1/gate")  # nothing listens on port 1
        judged = call(svc, tool_name="deploy_web").decision
        assert judged.action == "deny"  # the deny rule matches: its fail-closed answer
        assert judged.condition_error is not None
        assert "could not read the call history (OperationalError)" in judged.condition_error
        assert call(svc, tool_name="read_x").decision.action == "allow"  # no history read
    finally:
        svc.db.dispose()


def test_rules_without_history_send_nothing_more(db_url: str, clock: Clock) -> None:
    plain = _service(db_url, clock, [])
    try:
        with counting(plain.db.engine) as tally:
            assert call(plain, tool_name="read_x").decision.action == "allow"
            assert call(plain, tool_name="db_write", tool_args={"env": "prod"}).decision.action
        assert tally.count == 0, tally
    finally:
        plain.db.dispose()


def test_a_call_under_a_history_rule_sends_one_read_and_one_write(
    counting_service: GateService,
) -> None:
    svc = counting_service
    with counting(svc.db.engine) as tally:
        assert call(svc, tool_name="read_x").decision.action == "allow"  # no history here
    assert tally.count == 0, tally
    with counting(svc.db.engine) as tally:
        assert call(svc, tool_name="deploy_web").decision.action == "allow"
    selects = [s for s in tally.statements if s.upper().startswith("SELECT")]
    inserts = [s for s in tally.statements if "INSERT INTO counted_call" in s]
    # in one transaction: the caller's lock (PostgreSQL: an advisory lock; SQLite: the writer's
    # BEGIN IMMEDIATE), the read and the write
    lock = per_database(svc.db.engine, sqlite=0, postgres=1)
    assert (len(selects), len(inserts), tally.count) == (1 + lock, 1, 2 + lock), tally
    assert tally.transactions == 1, tally


def test_each_read_runs_on_its_index(counting_service: GateService, clock: Clock) -> None:
    svc = counting_service
    pay(svc, 1)
    windows = [counted.Window(clock.now), counted.Window(clock.now, "amount")]
    for per_session, index in (
        (False, "ix_counted_call_caller_at"),
        (True, "ix_counted_call_session_at"),
    ):
        with svc.db.read_conn() as conn:
            plan = _plan(
                conn,
                caller="billing-agent",
                session_id="s",
                windows=windows,
                per_session=per_session,
            )
        if per_session or conn.dialect.name == "sqlite":
            assert index in plan, plan
        else:  # PostgreSQL may take either index: both lead with the caller, then bound `at`
            assert "Index Cond: (((caller)::text = 'billing-agent'::text)" in plan, plan
        assert "Seq Scan on counted_call" not in plan and "SCAN counted_call" not in plan, plan


def _plan(conn: sa.Connection, **query: Any) -> str:
    """The database's plan for `counted.tallies(conn, **query)`: its statement, EXPLAINed."""
    statements: list[tuple[str, Any]] = []

    def keep(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        statements.append((statement, params))

    sa.event.listen(conn, "before_cursor_execute", keep)
    try:
        counted.tallies(conn, **query)
    finally:
        sa.event.remove(conn, "before_cursor_execute", keep)
    statement, params = statements[-1]
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params).all()
        return "\n".join(str(row[-1]) for row in rows)
    # a table of one row is read whole by choice: forbid that so the plan shows the index
    conn.exec_driver_sql("SET enable_seqscan = off")
    rows = conn.exec_driver_sql(f"EXPLAIN {statement}", params).all()
    return "\n".join(str(row[0]) for row in rows)


def test_rows_past_the_cap_are_pruned(counting_service: GateService, clock: Clock) -> None:
    svc = counting_service
    pay(svc, 5)
    clock.advance(hours=23)
    pay(svc, 7)
    clock.advance(hours=2)  # the first is 25 h old: past server.history_max_window (24 h)
    assert history.prune(svc.db, svc.settings, clock.now) == 1
    assert pay(svc, 1).decision.history[0][1] == 7


def test_an_ask_under_a_history_rule_adds_one_read_and_one_insert(
    counting_service: GateService,
) -> None:
    svc = counting_service
    pay(svc, 2000)  # over the budget from here on: every payment asks
    with counting(svc.db.engine) as plain:
        assert call(svc, tool_name="ask_x").decision.action == "ask"
    with counting(svc.db.engine) as counted_ask:
        assert pay(svc, 1).decision.action == "ask"
    added = [s for s in counted_ask.statements if "counted_call" in s]
    assert len(added) == 2 and added[0].upper().startswith("SELECT"), counted_ask
    assert "INSERT INTO counted_call" in added[1]
    lock = per_database(svc.db.engine, sqlite=0, postgres=1)
    assert counted_ask.count == plain.count + 2 + lock, (plain, counted_ask)
    # the locked read is one transaction; the insert rides in the ask's
    assert counted_ask.transactions == plain.transactions + 1, (plain, counted_ask)


def test_calls_judged_together_take_turns(counting_service: GateService) -> None:
    """Eight payments of 300 at once against a budget of 1000: the caller's lock makes them
    take turns, so exactly three run at once and five are asked (never a fourth allowed)."""
    svc = counting_service
    start = threading.Barrier(8)

    def one(_: int) -> str | None:
        start.wait()
        return pay(svc, 300).decision.action

    with ThreadPoolExecutor(8) as pool:
        answers = sorted(str(a) for a in pool.map(one, range(8)))
    assert answers == ["allow"] * 3 + ["ask"] * 5
    assert pay(svc, 1).decision.history[0][1] == 8 * 300  # the asked five are in flight
