"""Deadlines: extending one (up to the server's limit), reminders and escalation on a fixed
clock."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from gate.delivery.reminders import remind_and_escalate
from gate.store.rows import REQUEST
from tests.api.conftest import Clock, audit_kinds, post
from tests.conftest import Gate
from tests.support import config as cfg


def test_extend_deadline(ruled: Gate) -> None:
    req = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    assert (
        post(ruled, cfg.CAROL, f"/v1/requests/{req['id']}/extend", {"by": "10m"}).status_code == 403
    )
    r = post(ruled, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "10m"})
    assert r.status_code == 200
    assert r.json()["expires_at"] > req["expires_at"]
    assert (
        post(ruled, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "soon"}).status_code
        == 422
    )
    ruled.decide(req["id"], cfg.BOB)
    assert (
        post(ruled, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "10m"}).status_code == 409
    )


def test_remind_then_escalate(ruled: Gate, clock: Clock) -> None:
    req = ruled.submit(tool_name="escalate_me", tool_args={})["request"]
    assert ruled.decide(req["id"], cfg.CAROL).status_code == 403
    service = ruled.state.service
    assert remind_and_escalate(service, clock.now) == (0, 0)
    clock.now += timedelta(minutes=6)
    assert remind_and_escalate(service, clock.now) == (1, 0)
    assert remind_and_escalate(service, clock.now) == (0, 0)
    clock.now += timedelta(minutes=5)
    assert remind_and_escalate(service, clock.now) == (0, 1)
    assert audit_kinds(ruled, req["id"])[-2:] == ["reminded", "escalated"]
    r = ruled.decide(req["id"], cfg.CAROL)
    assert r.status_code == 200 and r.json()["status"] == "approved"


def nudge_at(gate: Gate, request_id: str) -> datetime | None:
    """When the reminder job next has work on the request, as stored."""
    with gate.state.service.db.read_conn() as conn:
        when: datetime | None = conn.execute(
            sa.select(REQUEST.c.nudge_at).where(REQUEST.c.id == request_id)
        ).scalar_one()
    return when


def test_a_tick_reads_only_requests_with_a_reminder_or_escalation_due(
    ruled: Gate, clock: Clock
) -> None:
    # The next nudge is stored with the request and moved by each mark; requests whose
    # rules remind nobody have none, so a tick never reads them (10,000 waiting requests
    # cost a tick ~70-165 ms of CPU every 5 s when each was read and its options parsed).
    quiet = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    assert nudge_at(ruled, quiet["id"]) is None
    req = ruled.submit(tool_name="escalate_me", tool_args={})["request"]
    created = datetime.fromisoformat(req["created_at"])
    assert nudge_at(ruled, req["id"]) == created + timedelta(minutes=5)  # remind_after
    clock.now += timedelta(minutes=6)
    assert remind_and_escalate(ruled.state.service, clock.now) == (1, 0)
    assert nudge_at(ruled, req["id"]) == created + timedelta(minutes=10)  # escalate_after
    clock.now += timedelta(minutes=5)
    assert remind_and_escalate(ruled.state.service, clock.now) == (0, 1)
    assert nudge_at(ruled, req["id"]) is None


def test_requests_from_before_the_nudge_column_get_their_real_next_time(
    ruled: Gate, clock: Clock
) -> None:
    # migration 0005 makes every waiting request due at once; the first tick stores each
    # one's real next time, reminding nobody early and writing no audit event
    quiet = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    req = ruled.submit(tool_name="escalate_me", tool_args={})["request"]
    with ruled.state.service.db.write_conn() as conn:
        conn.execute(sa.update(REQUEST).values(nudge_at=REQUEST.c.created_at))
    before = audit_kinds(ruled, req["id"])
    assert remind_and_escalate(ruled.state.service, clock.now) == (0, 0)
    assert nudge_at(ruled, quiet["id"]) is None
    created = datetime.fromisoformat(req["created_at"])
    assert nudge_at(ruled, req["id"]) == created + timedelta(minutes=5)
    assert audit_kinds(ruled, req["id"]) == before


def test_extend_stops_at_the_servers_limit(ruled: Gate) -> None:
    req = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    # max_timeout is 7 days: ask for more than that in one go, then once more.
    first = post(ruled, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "8d"})
    assert first.status_code == 200
    again = post(ruled, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "1h"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "deadline_at_limit"
