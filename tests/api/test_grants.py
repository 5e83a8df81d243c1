"""Time-boxed grants over the API: what each scope covers, the rule's limits, revocation and
expiry."""

from __future__ import annotations

from datetime import timedelta

from tests.api.conftest import Clock, audit_kinds, post
from tests.conftest import Gate
from tests.support import config as cfg


def test_session_grant_allows_later_calls_until_revoked(ruled: Gate) -> None:
    call = {
        "tool_name": "shell_exec",
        "tool_args": {"cmd": "ls"},
        "session_id": "s1",
        "agent_id": "coder",
    }
    req = ruled.submit(**call)["request"]
    r = post(
        ruled,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "session", "duration": "30m"}},
    )
    assert r.status_code == 200, r.text

    later = ruled.submit(**{**call, "tool_args": {"cmd": "pwd"}})
    assert later["decision"] == "allow"
    assert later["rule"] == "grantable"
    assert later["request"]["status"] == "approved"
    assert later["request"]["decided_via"] == "grant"
    assert req["id"] in later["reason"]
    assert "allowed_by_grant" in audit_kinds(ruled, later["request"]["id"])

    other_session = ruled.submit(**{**call, "session_id": "s2"})
    assert other_session["decision"] == "ask"

    with ruled.client(cfg.BOB) as c:
        grants = c.get("/v1/grants").json()
        assert [(g["scope"], g["session_id"], g["uses"]) for g in grants] == [("session", "s1", 1)]
        revoked = c.post(f"/v1/grants/{grants[0]['id']}/revoke")
        assert revoked.json()["status"] == "revoked"
        assert c.post(f"/v1/grants/{grants[0]['id']}/revoke").status_code == 409
        assert c.get("/v1/grants").json() == []
    assert ruled.submit(**call)["decision"] == "ask"


def test_call_grant_covers_only_the_same_arguments(ruled: Gate) -> None:
    call = {"tool_name": "shell_exec", "tool_args": {"cmd": "make test"}}
    req = ruled.submit(**call)["request"]
    post(
        ruled,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "call", "duration": "10m"}},
    )
    assert ruled.submit(**call)["decision"] == "allow"
    assert (
        ruled.submit(tool_name="shell_exec", tool_args={"cmd": "make deploy"})["decision"] == "ask"
    )


def test_grants_are_checked_against_the_rule(ruled: Gate) -> None:
    req = ruled.submit(tool_name="shell_exec", tool_args={}, session_id="s")["request"]
    too_long = post(
        ruled,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "session", "duration": "2h"}},
    )
    assert too_long.json()["error"]["code"] == "grant_too_long"
    other = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    r = post(
        ruled,
        cfg.ALICE,
        f"/v1/requests/{other['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "call", "duration": "5m"}},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "grant_not_offered"
    assert ruled.decide(other["id"], cfg.ALICE).json()["status"] == "approved"


def test_grants_expire_with_the_sweep(ruled: Gate, clock: Clock) -> None:
    call = {"tool_name": "shell_exec", "tool_args": {}, "agent_id": "coder"}
    req = ruled.submit(**call)["request"]
    post(
        ruled,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "approve", "grant": {"scope": "agent", "duration": "15m"}},
    )
    assert ruled.submit(**call)["decision"] == "allow"
    waiting = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    clock.now += timedelta(minutes=16)
    # one sweep ends the grant and expires the request, both found by one statement
    assert ruled.state.service.expire_due() == 1
    with ruled.client(cfg.ADMIN) as c:
        ended = c.get("/v1/grants", params={"active": "false"}).json()
        assert c.get(f"/v1/requests/{waiting['id']}").json()["status"] == "expired"
    assert [g["status"] for g in ended] == ["expired"]
    assert ruled.submit(**call)["decision"] == "ask"
