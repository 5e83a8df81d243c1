"""Deadlines: extending one (up to the server's limit), reminders and escalation on a fixed
clock."""

from __future__ import annotations

from datetime import timedelta

from gate.reminders import remind_and_escalate
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


def test_extend_stops_at_the_servers_limit(ruled: Gate) -> None:
    req = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    # max_timeout is 7 days: ask for more than that in one go, then once more.
    first = post(ruled, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "8d"})
    assert first.status_code == 200
    again = post(ruled, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "1h"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "deadline_at_limit"
