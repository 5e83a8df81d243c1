"""Denials as a signal (issue 31, item 8): an agent trips after K rejections in a row or M
within an hour, every further call of it is asked (with the reason frozen onto the request)
until a person resets it; the reset is audited; un-gated calls read no database. On SQLite
and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gate.base.statuses import Verdict
from gate.decisions import deciding, denials
from gate.decisions.service import GateService
from gate.inputs.bodies import GateCall
from tests.core.conftest import AGENT, OTHER_AGENT, Clock, approver, ask, service_of
from tests.support import config as cfg
from tests.support.sql_counter import counting, per_database

TRIPPED_WORDS = "agent 'bot' tripped: 3 rejections in a row; asked until a person resets it"


def _service(db_url: str, clock: Clock, **limits: int) -> GateService:
    data = cfg.settings_data(db_url)
    data["denials"] = limits
    strict = {"name": "strict", "tools": ["strict_*"], "denials_in_a_row": 1, "timeout": "10m"}
    data["rules"] = [strict, *data["rules"]]
    return service_of(data, clock)


@pytest.fixture
def tripping(db_url: str, clock: Clock) -> Iterator[GateService]:
    """A service whose agents trip after 3 rejections in a row (per hour: off)."""
    svc = _service(db_url, clock, in_a_row=3)
    yield svc
    svc.db.dispose()


def reject(service: GateService, request_id: str) -> None:
    result = deciding.decide(
        service, request_id, approver(service, "alice"), Verdict.reject, "not this customer"
    )
    assert result.changed


def approve(service: GateService, request_id: str) -> None:
    assert deciding.decide(service, request_id, approver(service, "alice"), Verdict.approve).changed


def refund(service: GateService, n: int, agent_id: str | None = "bot") -> str:
    return ask(service, tool_name="refund", tool_args={"amount": n}, agent_id=agent_id)


def judged(service: GateService, principal: Any = AGENT, **call: Any) -> Any:
    return service.submit(GateCall(**call), principal)


def test_three_rejections_in_a_row_trip_the_agent(tripping: GateService) -> None:
    svc = tripping
    for n in range(2):
        reject(svc, refund(svc, n))
    assert judged(svc, tool_name="read_file", agent_id="bot").decision.action == "allow"
    third = refund(svc, 2)
    reject(svc, third)
    # the allow rule's call is asked now, with why on the request (and its offers: the cards)
    asked = judged(svc, tool_name="read_file", tool_args={"path": "a"}, agent_id="bot")
    assert (asked.decision.action, asked.decision.rule.name) == ("ask", denials.TRIPPED_RULE)
    assert asked.view is not None and asked.view.status == "pending"
    assert asked.view.reason == TRIPPED_WORDS
    assert asked.view.offers.tripped == TRIPPED_WORDS
    # an ask keeps its rule, says why too, and no grant covers it
    again = judged(svc, tool_name="refund", tool_args={"amount": 9}, agent_id="bot")
    assert again.view is not None and again.view.rule == "refunds"
    assert TRIPPED_WORDS in (again.view.reason or "") and again.view.offers.tripped
    # policy's deny stays a deny; another agent, and the same token with no agent_id, are free
    denied = judged(svc, tool_name="db_write", tool_args={"env": "prod"}, agent_id="bot")
    assert denied.decision.action == "deny"
    assert judged(svc, tool_name="read_file", agent_id="bot-2").decision.action == "allow"
    assert judged(svc, tool_name="read_file").decision.action == "allow"
    # the trip is an audit event of the rejection that tripped it
    view = svc.view(third, full=True)
    assert view is not None
    tripped = [e for e in view.audit if e.kind == denials.TRIPPED_EVENT]
    assert [e.detail for e in tripped] == [{"agent": "bot", "why": "3 rejections in a row"}]


def test_an_approval_breaks_the_row(tripping: GateService) -> None:
    svc = tripping
    reject(svc, refund(svc, 1))
    reject(svc, refund(svc, 2))
    approve(svc, refund(svc, 3))
    reject(svc, refund(svc, 4))
    reject(svc, refund(svc, 5))
    assert judged(svc, tool_name="read_file", agent_id="bot").decision.action == "allow"
    reject(svc, refund(svc, 6))
    assert judged(svc, tool_name="read_file", agent_id="bot").decision.action == "ask"


def test_m_rejections_within_an_hour_trip_the_agent(db_url: str, clock: Clock) -> None:
    svc = _service(db_url, clock, in_a_row=0, per_hour=3)
    try:
        reject(svc, refund(svc, 1))
        clock.advance(minutes=61)  # out of the hour by the third rejection
        for n in (2, 3):
            approve(svc, refund(svc, n * 10))
            reject(svc, refund(svc, n))
        assert judged(svc, tool_name="read_file", agent_id="bot").decision.action == "allow"
        clock.advance(minutes=30)
        reject(svc, refund(svc, 4))
        asked = judged(svc, tool_name="read_file", agent_id="bot")
        assert asked.decision.tripped == (
            "agent 'bot' tripped: 3 rejections within an hour; asked until a person resets it"
        )
    finally:
        svc.db.dispose()


def test_a_rule_sets_its_own_threshold(tripping: GateService) -> None:
    svc = tripping
    first = ask(svc, tool_name="strict_thing", tool_args={}, agent_id="careful")
    reject(svc, first)
    asked = judged(svc, tool_name="read_file", agent_id="careful")
    assert asked.decision.tripped and "1 rejections in a row" in asked.decision.tripped


def test_an_agent_without_agent_id_is_its_token(tripping: GateService) -> None:
    svc = tripping
    for n in range(3):
        reject(svc, refund(svc, n, agent_id=None))
    assert judged(svc, tool_name="read_file").decision.action == "ask"  # billing-agent
    assert judged(svc, OTHER_AGENT, tool_name="read_file").decision.action == "allow"


def test_a_reset_is_audited_and_counting_starts_over(tripping: GateService, clock: Clock) -> None:
    svc = tripping
    ids = [refund(svc, n) for n in range(3)]
    for request_id in ids:
        reject(svc, request_id)
    assert svc.trips.note_for("bot") == TRIPPED_WORDS
    clock.advance(seconds=5)
    ended = denials.reset(svc, "bot", by="alice", via="api")
    assert ended is not None and ended.reason == TRIPPED_WORDS and ended.request_id == ids[-1]
    assert denials.reset(svc, "bot", by="alice", via="api") is None  # not tripped any more
    assert svc.trips.note_for("bot") is None
    assert judged(svc, tool_name="read_file", agent_id="bot").decision.action == "allow"
    view = svc.view(ids[-1], full=True)
    assert view is not None
    (reset,) = [e for e in view.audit if e.kind == denials.RESET_EVENT]
    assert (reset.actor, reset.via, reset.detail["agent"]) == ("alice", "api", "bot")
    # the rejections before the reset no longer count
    clock.advance(seconds=5)
    reject(svc, refund(svc, 10))
    reject(svc, refund(svc, 11))
    assert judged(svc, tool_name="read_file", agent_id="bot").decision.action == "allow"
    reject(svc, refund(svc, 12))
    assert judged(svc, tool_name="read_file", agent_id="bot").decision.action == "ask"


def test_a_restarted_replica_loads_the_trips(tripping: GateService, db_url: str) -> None:
    svc = tripping
    for n in range(3):
        reject(svc, refund(svc, n))
    fresh = _service(db_url, Clock(), in_a_row=3)
    try:
        assert fresh.trips.note_for("bot") is None  # not loaded yet
        fresh.trips.reload()
        assert fresh.trips.tripped == {"bot": TRIPPED_WORDS}
    finally:
        fresh.db.dispose()


def test_an_ungated_call_reads_no_database_whoever_is_tripped(tripping: GateService) -> None:
    svc = tripping
    call = GateCall(tool_name="read_file", tool_args={}, agent_id="fine")
    with counting(svc.db.engine) as tally:
        assert svc.submit(call, AGENT).decision.action == "allow"
    assert (tally.count, tally.transactions) == (0, 0), str(tally)
    for n in range(3):
        reject(svc, refund(svc, n))
    with counting(svc.db.engine) as tally:
        assert svc.submit(call, AGENT).decision.action == "allow"
    assert (tally.count, tally.transactions) == (0, 0), str(tally)


def test_what_a_rejection_costs_with_denials_on(tripping: GateService, db_url: str) -> None:
    svc = tripping
    plain = _service(db_url, Clock())  # the [denials] table off: nothing is counted
    try:
        first = refund(plain, 1)
        with counting(plain.db.engine) as off:
            reject(plain, first)
    finally:
        plain.db.dispose()
    second = refund(svc, 2, agent_id="other")
    with counting(svc.db.engine) as on:
        reject(svc, second)
    # the count (one statement), and on PostgreSQL the agent's advisory lock before it (the
    # held writes are sent before the count instead of at the commit: no more statements)
    extra = per_database(svc.db.engine, sqlite=1, postgres=2)
    assert (on.count - off.count, on.transactions) == (extra, 1), (str(off), str(on))
