"""Beyond yes/no, over the real app: edits, grants, binding, reasons, extend, reminders,
escalation, outcome audit, the hash-chained audit log, and session cancel."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gate.app import create_app
from gate.binding import call_hash
from gate.config import Settings
from gate.models import utcnow
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.servers import ThreadServer

EXTRA_RULES: list[dict[str, Any]] = [
    {
        "name": "editable-refunds",
        "tools": ["refund_*"],
        "approvers": ["group:finance"],
        "timeout": "10m",
        "reject_reasons": ["wrong customer", "too expensive"],
    },
    {"name": "no-edits", "tools": ["strict_*"], "allow_edits": False, "timeout": "10m"},
    {
        "name": "grantable",
        "tools": ["shell_*"],
        "timeout": "10m",
        "grant_scopes": ["call", "session", "agent"],
        "max_grant": "1h",
    },
    {
        "name": "escalating",
        "tools": ["escalate_*"],
        "approvers": ["group:finance"],
        "timeout": "1h",
        "remind_after": "5m",
        "escalate_after": "10m",
        "escalate_approvers": ["group:ops"],
    },
]


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> Any:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def beyond(db_url: str, clock: Clock) -> Any:
    data = cfg.settings_data(db_url, sweep_interval_seconds=3600, followup_interval_seconds=3600)
    data["rules"] = EXTRA_RULES + data["rules"]
    settings = Settings(**data)
    server = ThreadServer(create_app(settings, clock=clock)).start()
    yield Gate(server, settings)
    server.stop()


def _post(gate: Gate, token: str, path: str, body: Any = None) -> Any:
    with gate.client(token) as c:
        return c.post(path, json=body)


def _audit_kinds(gate: Gate, rid: str) -> list[str]:
    with gate.client(cfg.ADMIN) as c:
        return [e["kind"] for e in c.get(f"/v1/requests/{rid}/audit").json()]


# -- approve with edits ---------------------------------------------------------------------


def test_approve_with_edits_binds_the_edited_call(beyond: Gate) -> None:
    req = beyond.submit(
        tool_name="refund_customer",
        tool_args={"customer": "c1", "amount": 900},
        idempotency_key="toolu_refund",
    )["request"]
    edited = {"customer": "c1", "amount": 500}
    r = _post(
        beyond,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "edited_args": edited, "comment": "half now"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "approved"
    assert body["tool_args"] == {"customer": "c1", "amount": 900}
    assert body["approved_args"] == edited
    assert body["args_hash"] == call_hash("refund_customer", edited, "toolu_refund")
    assert body["reason"] == (
        "Approved with edits by alice in the API: half now Changed: amount 900 -> 500"
    )
    with beyond.client(cfg.ADMIN) as c:
        events = c.get(f"/v1/requests/{req['id']}/audit").json()
    assert events[-1]["detail"]["edits"] == {"amount": {"from": 900, "to": 500}}


def test_rules_can_forbid_edits(beyond: Gate) -> None:
    for tool in ("strict_thing", "wire_money"):  # forbidden outright; quorum rule
        req = beyond.submit(tool_name=tool, tool_args={"a": 1})["request"]
        r = _post(
            beyond,
            cfg.ALICE,
            f"/v1/requests/{req['id']}/decision",
            {"verdict": "approve", "edited_args": {"a": 2}},
        )
        assert r.status_code == 422
        assert r.json()["error"]["code"] == "edits_not_allowed"


# -- binding --------------------------------------------------------------------------------


def test_an_approval_never_replays_for_other_arguments(beyond: Gate) -> None:
    first = beyond.submit(
        tool_name="pay_vendor", tool_args={"amount": 60000}, idempotency_key="toolu_X"
    )["request"]
    _post(beyond, cfg.ALICE, f"/v1/requests/{first['id']}/decision", {"verdict": "approve"})
    same = beyond.submit(
        tool_name="pay_vendor", tool_args={"amount": 60000}, idempotency_key="toolu_X"
    )["request"]
    assert same["id"] == first["id"] and same["status"] == "approved"
    with beyond.client(cfg.AGENT) as c:
        r = c.post(
            "/v1/gate",
            json={
                "tool_name": "pay_vendor",
                "tool_args": {"amount": 990000},
                "idempotency_key": "toolu_X",
            },
        )
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "idempotency_key_reused"


# -- preset reasons -------------------------------------------------------------------------


def test_preset_reject_reasons_reach_the_model(beyond: Gate) -> None:
    req = beyond.submit(tool_name="refund_customer", tool_args={"amount": 1})["request"]
    bad = _post(
        beyond,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "reject", "reasons": ["because"]},
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "unknown_reason"
    r = _post(
        beyond,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {
            "verdict": "reject",
            "reasons": ["wrong customer", "too expensive"],
            "comment": "check the ticket",
        },
    )
    assert r.json()["reason"] == (
        "Rejected by alice in the API: wrong customer; too expensive - check the ticket"
    )
    assert r.json()["options"]["reject_reasons"] == ["wrong customer", "too expensive"]


# -- grants ---------------------------------------------------------------------------------


def test_session_grant_allows_later_calls_until_revoked(beyond: Gate) -> None:
    call = {
        "tool_name": "shell_exec",
        "tool_args": {"cmd": "ls"},
        "session_id": "s1",
        "agent_id": "coder",
    }
    req = beyond.submit(**call)["request"]
    r = _post(
        beyond,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "session", "duration": "30m"}},
    )
    assert r.status_code == 200, r.text

    later = beyond.submit(**{**call, "tool_args": {"cmd": "pwd"}})
    assert later["decision"] == "allow"
    assert later["rule"] == "grantable"
    assert later["request"]["status"] == "approved"
    assert later["request"]["decided_via"] == "grant"
    assert req["id"] in later["reason"]
    assert "allowed_by_grant" in _audit_kinds(beyond, later["request"]["id"])

    other_session = beyond.submit(**{**call, "session_id": "s2"})
    assert other_session["decision"] == "ask"

    with beyond.client(cfg.BOB) as c:
        grants = c.get("/v1/grants").json()
        assert [(g["scope"], g["session_id"], g["uses"]) for g in grants] == [("session", "s1", 1)]
        revoked = c.post(f"/v1/grants/{grants[0]['id']}/revoke")
        assert revoked.json()["status"] == "revoked"
        assert c.post(f"/v1/grants/{grants[0]['id']}/revoke").status_code == 409
        assert c.get("/v1/grants").json() == []
    assert beyond.submit(**call)["decision"] == "ask"


def test_call_grant_covers_only_the_same_arguments(beyond: Gate) -> None:
    call = {"tool_name": "shell_exec", "tool_args": {"cmd": "make test"}}
    req = beyond.submit(**call)["request"]
    _post(
        beyond,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "call", "duration": "10m"}},
    )
    assert beyond.submit(**call)["decision"] == "allow"
    assert (
        beyond.submit(tool_name="shell_exec", tool_args={"cmd": "make deploy"})["decision"] == "ask"
    )


def test_grants_are_checked_against_the_rule(beyond: Gate) -> None:
    req = beyond.submit(tool_name="shell_exec", tool_args={}, session_id="s")["request"]
    too_long = _post(
        beyond,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "session", "duration": "2h"}},
    )
    assert too_long.json()["error"]["code"] == "grant_too_long"
    other = beyond.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    r = _post(
        beyond,
        cfg.ALICE,
        f"/v1/requests/{other['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "call", "duration": "5m"}},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "grant_not_offered"
    assert beyond.decide(other["id"], cfg.ALICE).json()["status"] == "approved"


def test_grants_expire_with_the_sweep(beyond: Gate, clock: Clock) -> None:
    call = {"tool_name": "shell_exec", "tool_args": {}, "agent_id": "coder"}
    req = beyond.submit(**call)["request"]
    _post(
        beyond,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "agent", "duration": "15m"}},
    )
    assert beyond.submit(**call)["decision"] == "allow"
    clock.now += timedelta(minutes=16)
    beyond.state.service.expire_due()
    with beyond.client(cfg.ADMIN) as c:
        ended = c.get("/v1/grants", params={"active": "false"}).json()
    assert [g["status"] for g in ended] == ["expired"]
    assert beyond.submit(**call)["decision"] == "ask"


# -- extend, remind, escalate ---------------------------------------------------------------


def test_extend_deadline(beyond: Gate) -> None:
    req = beyond.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    assert (
        _post(beyond, cfg.CAROL, f"/v1/requests/{req['id']}/extend", {"by": "10m"}).status_code
        == 403
    )
    r = _post(beyond, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "10m"})
    assert r.status_code == 200
    assert r.json()["expires_at"] > req["expires_at"]
    assert (
        _post(beyond, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "soon"}).status_code
        == 422
    )
    beyond.decide(req["id"], cfg.BOB)
    assert (
        _post(beyond, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "10m"}).status_code
        == 409
    )


def test_remind_then_escalate(beyond: Gate, clock: Clock) -> None:
    from gate.followups import remind_and_escalate

    req = beyond.submit(tool_name="escalate_me", tool_args={})["request"]
    assert beyond.decide(req["id"], cfg.CAROL).status_code == 403
    service = beyond.state.service
    assert remind_and_escalate(service, clock.now) == (0, 0)
    clock.now += timedelta(minutes=6)
    assert remind_and_escalate(service, clock.now) == (1, 0)
    assert remind_and_escalate(service, clock.now) == (0, 0)
    clock.now += timedelta(minutes=5)
    assert remind_and_escalate(service, clock.now) == (0, 1)
    assert _audit_kinds(beyond, req["id"])[-2:] == ["reminded", "escalated"]
    r = beyond.decide(req["id"], cfg.CAROL)
    assert r.status_code == 200 and r.json()["status"] == "approved"


# -- outcome, audit chain, session end ------------------------------------------------------


def test_outcome_audit_reads_asked_approved_ran(beyond: Gate) -> None:
    req = beyond.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    early = _post(beyond, cfg.AGENT, f"/v1/requests/{req['id']}/outcome", {"outcome": "ran"})
    assert early.status_code == 409 and early.json()["error"]["code"] == "not_approved"
    beyond.decide(req["id"], cfg.ALICE)
    r = _post(
        beyond,
        cfg.AGENT,
        f"/v1/requests/{req['id']}/outcome",
        {"outcome": "ran", "summary": "paid, txn 881"},
    )
    assert r.json()["outcome"] == "ran"
    assert (
        _post(
            beyond, cfg.AGENT, f"/v1/requests/{req['id']}/outcome", {"outcome": "failed"}
        ).status_code
        == 409
    )
    assert _audit_kinds(beyond, req["id"]) == ["created", "approved", "ran"]


def test_audit_chain_detects_tampering(beyond: Gate, tmp_path: Path) -> None:
    req = beyond.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    beyond.decide(req["id"], cfg.ALICE, "reject", "no")
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml({"server": {"database_url": beyond.settings.server.database_url}}))
    ok = subprocess.run(
        [sys.executable, "-m", "gate.cli", "audit", "verify", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and "audit chain intact" in ok.stdout
    with beyond.state.db.write() as s:
        s.execute(sa.text("UPDATE audit_event SET actor = 'mallory' WHERE kind = 'rejected'"))
    bad = subprocess.run(
        [sys.executable, "-m", "gate.cli", "audit", "verify", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1
    assert req["id"] in bad.stdout and "rejected" in bad.stdout


def test_session_end_cancels_its_pending_requests(beyond: Gate) -> None:
    ids = [
        beyond.submit(tool_name="pay_vendor", tool_args={"amount": 60000 + i}, session_id="sess-1")[
            "request"
        ]["id"]
        for i in range(2)
    ]
    other = beyond.submit(tool_name="pay_vendor", tool_args={"amount": 60000}, session_id="sess-2")[
        "request"
    ]["id"]
    seen: dict[str, Any] = {}

    def wait() -> None:
        with beyond.client(cfg.AGENT) as c:
            seen.update(c.get(f"/v1/requests/{ids[0]}/wait", params={"timeout": 20}).json())

    t = threading.Thread(target=wait)
    t.start()
    r = _post(beyond, cfg.AGENT, "/v1/sessions/sess-1/cancel", {"reason": "session ended"})
    assert sorted(r.json()["cancelled"]) == sorted(ids)
    t.join(10)
    assert seen["status"] == "cancelled"
    assert seen["reason"] == "Cancelled by billing-agent: session ended"
    with beyond.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{other}").json()["status"] == "pending"


def test_extend_stops_at_the_servers_limit(beyond: Gate) -> None:
    req = beyond.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    # max_timeout is 7 days: ask for more than that in one go, then once more.
    first = _post(beyond, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "8d"})
    assert first.status_code == 200
    again = _post(beyond, cfg.ALICE, f"/v1/requests/{req['id']}/extend", {"by": "1h"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "deadline_at_limit"
