"""Acknowledging ("I'm on it"): only someone who may decide may; it stops reminders and
escalation, is audited, shows in the API and the card's words, and decides nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gate.delivery.reminders import remind_and_escalate
from tests.api.conftest import Clock, audit_kinds, post
from tests.conftest import Gate
from tests.support import config as cfg


def ack(gate: Gate, token: str, request_id: str) -> Any:
    return post(gate, token, f"/v1/requests/{request_id}/acknowledge")


def test_an_approver_acknowledges_and_nobody_is_nudged(ruled: Gate, clock: Clock) -> None:
    rid = ruled.submit(tool_name="escalate_me", tool_args={})["request"]["id"]
    # carol is not an approver (until escalation), the agent may not act at all
    refused = ack(ruled, cfg.CAROL, rid)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "not_an_approver"
    assert ack(ruled, cfg.AGENT, rid).status_code == 403
    clock.now += timedelta(minutes=1)
    done = ack(ruled, cfg.ALICE, rid)
    assert done.status_code == 200, done.text
    body = done.json()
    assert (body["status"], body["acknowledged_by"]) == ("pending", "alice")
    assert body["acknowledged_at"] is not None and body["votes"] == []
    # past both the reminder and the escalation: neither happens
    clock.now += timedelta(minutes=30)
    assert remind_and_escalate(ruled.state.service, clock.now) == (0, 0)
    assert audit_kinds(ruled, rid) == ["created", "acknowledged"]
    view = ruled.state.service.view(rid)
    assert view is not None
    assert "alice is on it (acknowledged" in view.outcome_sentence()
    # a second acknowledgement changes nothing and says who was first
    again = ack(ruled, cfg.BOB, rid).json()
    assert again["acknowledged_by"] == "alice"
    assert audit_kinds(ruled, rid) == ["created", "acknowledged"]
    # deciding is still open to every approver, and ends the acknowledgement's words
    assert ruled.decide(rid, cfg.BOB).status_code == 200
    view = ruled.state.service.view(rid)
    assert view is not None and view.acknowledgement is None
    late = ack(ruled, cfg.ALICE, rid)
    assert late.status_code == 409


def test_unknown_request_is_a_404(ruled: Gate) -> None:
    r = ack(ruled, cfg.ALICE, "01NOSUCHREQUEST")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "request_not_found"


def test_after_escalation_the_escalated_approver_may_acknowledge(ruled: Gate, clock: Clock) -> None:
    rid = ruled.submit(tool_name="escalate_me", tool_args={})["request"]["id"]
    clock.now += timedelta(minutes=11)
    remind_and_escalate(ruled.state.service, clock.now)
    remind_and_escalate(ruled.state.service, clock.now)
    r = ack(ruled, cfg.CAROL, rid)
    assert r.status_code == 200 and r.json()["acknowledged_by"] == "carol"
    assert audit_kinds(ruled, rid)[-3:] == ["reminded", "escalated", "acknowledged"]
