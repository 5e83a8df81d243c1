"""The decision log: every answer of `POST /v1/gate` buffered on the hot path (no statement
of its own) and written once a window in one multi-row INSERT; pruned by age; `log = false`.

On SQLite and PostgreSQL, through `v1.gate_answer`, the function both the lean route and the
FastAPI route answer with.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from gate.api import v1
from gate.asking.binding import call_hash
from gate.base.statuses import Verdict
from gate.config.features import DecisionLogSettings
from gate.decisions.decision_log import DecisionLog
from gate.decisions.service import GateService
from gate.inputs.bodies import GateCall
from gate.store import decision_log as store
from tests.core.conftest import AGENT, RULES, Clock, approver, service_of
from tests.support import config as cfg
from tests.support.sql_counter import counting, per_database


@pytest.fixture
def logged(service: GateService, clock: Clock) -> DecisionLog:
    service.configured_channels = service.settings.channels.configured()
    decision_log = DecisionLog(
        db=service.db, settings=DecisionLogSettings(), revision=service.policy.revision, clock=clock
    )
    service.decision_log = decision_log
    return decision_log


def answer(service: GateService, **call: Any) -> dict[str, Any]:
    """What `POST /v1/gate` answers, through the function both of its routes answer with."""
    import json

    body = asyncio.run(v1.gate_answer(service, GateCall(**call), AGENT))
    found: dict[str, Any] = json.loads(body)
    return found


def rows(service: GateService) -> list[store.DecisionRow]:
    with service.db.read_conn() as conn:
        found, _ = store.page(conn, filters={}, limit=500)
    return list(reversed(found))


def test_answers_add_no_statement_and_a_window_is_one_insert(
    service: GateService, logged: DecisionLog
) -> None:
    with counting(service.db.engine) as tally:
        for n in range(20):
            answer(service, tool_name="read_file", tool_args={"path": f"/tmp/{n}"})
    assert (tally.count, tally.transactions) == (0, 0), str(tally)
    # an ask costs what it cost before the log (tests/core/test_statement_counts.py)
    with counting(service.db.engine) as tally:
        asked = answer(service, tool_name="refund", tool_args={"amount": 1})
    writes = per_database(service.db.engine, sqlite=4, postgres=2)
    assert (tally.count, tally.transactions) == (writes, 1), str(tally)
    with counting(service.db.engine) as tally:
        assert logged.flush() == 21
    assert (tally.count, tally.transactions) == (1, 1), str(tally)
    assert tally.statements[0].startswith("INSERT INTO decision_log")
    found = rows(service)
    assert [r.answer for r in found] == ["allow"] * 20 + ["ask"]
    assert found[-1].request_id == asked["request"]["id"]
    assert found[-1].rule == "refunds"
    assert {r.policy_revision for r in found} == {service.policy.revision}
    assert logged.flush() == 0  # nothing left: no statement at all


def test_a_row_records_the_call_masked_and_hashed(
    service: GateService, logged: DecisionLog, clock: Clock
) -> None:
    args = {"path": "/etc/x", "api_key": "sk-live-123456789", "n": 3}
    answer(
        service,
        tool_name="read_file",
        tool_args=args,
        agent_id="bot-1",
        session_id="s-1",
        user_id="u-1",
        metadata={"team": "a"},
    )
    logged.flush()
    (row,) = rows(service)
    assert row.at == clock.now
    assert (row.agent_id, row.session_id, row.user_id) == ("bot-1", "s-1", "u-1")
    assert row.submitted_by == AGENT.name
    assert row.masked_args == {"path": "/etc/x", "api_key": "[masked]", "n": 3}
    assert row.args_hash == call_hash("read_file", args)
    assert row.facts == {"args": args, "metadata": {"team": "a"}}
    assert (row.rule, row.answer, row.request_id) == ("reads", "allow", None)


def test_a_grant_used_is_logged_as_granted(service: GateService, logged: DecisionLog) -> None:
    from gate.decisions import deciding

    first = answer(service, tool_name="refund", tool_args={"amount": 1}, agent_id="bot")
    result = deciding.decide(
        service,
        first["request"]["id"],
        approver(service, "alice"),
        Verdict.approve,
        grant=("agent", "30m"),
    )
    assert result.changed
    second = answer(service, tool_name="refund", tool_args={"amount": 2}, agent_id="bot")
    assert second["decision"] == "allow"
    logged.flush()
    assert [(r.answer, r.rule) for r in rows(service)] == [
        ("ask", "refunds"),
        ("granted", "refunds"),
    ]
    assert rows(service)[-1].request_id == second["request"]["id"]


def test_a_rule_with_log_false_is_not_logged(db_url: str, clock: Clock) -> None:
    data = cfg.settings_data(db_url)
    data["rules"] = [
        {"name": "chatty", "tools": ["list_*"], "action": "allow", "log": False},
        *data["rules"],
    ]
    service = service_of(data, clock)
    try:
        decision_log = DecisionLog(
            db=service.db, settings=DecisionLogSettings(), revision="r", clock=clock
        )
        service.decision_log = decision_log
        answer(service, tool_name="list_dir", tool_args={})
        answer(service, tool_name="db_write", tool_args={"env": "prod"})
        decision_log.flush()
        assert [(r.rule, r.answer) for r in rows(service)] == [("deny-prod-writes", "deny")]
    finally:
        service.db.dispose()


def test_a_shadow_rules_would_have_answer_is_logged_beside_the_live_one(
    db_url: str, clock: Clock
) -> None:
    # issue 31.5: a shadow rule never answers; what it would have answered goes in the log
    from datetime import timedelta

    data = cfg.settings_data(db_url)
    until = (clock() + timedelta(days=7)).isoformat()
    trial = {"name": "ask-reads", "tools": ["read_*"], "action": "ask", "mode": "shadow"}
    data["rules"] = [{**trial, "until": until}, *data["rules"]]
    service = service_of(data, clock)
    try:
        decision_log = DecisionLog(
            db=service.db, settings=DecisionLogSettings(), revision="r", clock=clock
        )
        service.decision_log = decision_log
        assert answer(service, tool_name="read_file", tool_args={"path": "/tmp/x"})["decision"] == (
            "allow"
        )
        answer(service, tool_name="db_write", tool_args={"env": "prod"})
        decision_log.flush()
        logged = {r.tool_name: (r.answer, r.shadow) for r in rows(service)}
        would = [{"rule": "ask-reads", "would": "ask", "flip": "allow->ask"}]
        assert logged["read_file"] == ("allow", would)
        assert logged["db_write"] == ("deny", None)  # the shadow rule does not match it
    finally:
        service.db.dispose()


def test_log_false_is_refused_on_a_rule_that_asks() -> None:
    from gate.base.errors import ConfigError

    data = cfg.settings_data("sqlite:///:memory:")
    data["rules"] = [{"name": "quiet-ask", "tools": ["x"], "log": False}]
    with pytest.raises((ConfigError, ValueError), match="log = false is for allow rules"):
        from gate.config.settings import Settings

        Settings(**data)


def test_retention_deletes_old_rows_and_clears_whole_arguments(
    service: GateService, logged: DecisionLog, clock: Clock
) -> None:
    answer(service, tool_name="read_file", tool_args={"n": 1})
    logged.flush()
    clock.advance(days=8)
    answer(service, tool_name="read_file", tool_args={"n": 2})
    logged.flush()
    assert logged.prune() == (0, 1)  # the first row's whole arguments are past 7 days
    first, second = rows(service)
    assert first.facts is None and first.masked_args == {"n": 1}
    assert second.facts == {"args": {"n": 2}, "metadata": {}}
    clock.advance(days=23)  # the first row is 31 days old, the second 23
    assert logged.prune() == (1, 1)
    assert [r.masked_args for r in rows(service)] == [{"n": 2}]


def test_a_failed_write_keeps_the_batch_for_the_next_window(
    service: GateService, logged: DecisionLog, caplog: pytest.LogCaptureFixture
) -> None:
    answer(service, tool_name="read_file", tool_args={"n": 1})
    with service.db.write_conn() as conn:  # the table gone: every write fails
        conn.execute(sa.text("ALTER TABLE decision_log RENAME TO decision_log_away"))
    assert logged.flush() == 0
    assert "cannot write 1 answer(s)" in caplog.text
    answer(service, tool_name="read_file", tool_args={"n": 2})
    with service.db.write_conn() as conn:
        conn.execute(sa.text("ALTER TABLE decision_log_away RENAME TO decision_log"))
    assert logged.flush() == 2
    assert [r.masked_args for r in rows(service)] == [{"n": 1}, {"n": 2}]
    assert "writing again" in caplog.text


def test_a_full_buffer_drops_and_says_so(
    service: GateService, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    decision_log = DecisionLog(
        db=service.db, settings=DecisionLogSettings(max_buffered=100), revision="r", clock=clock
    )
    service.decision_log = decision_log
    for n in range(103):
        answer(service, tool_name="read_file", tool_args={"n": n})
    assert decision_log.flush() == 100
    assert "3 answer(s) dropped" in caplog.text


def test_the_rules_are_the_core_tests_rules() -> None:
    assert RULES[0]["name"] == "refunds"  # the ask and grant tests above lean on it
