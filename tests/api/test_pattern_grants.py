"""Pattern and counted grants over the API: pinning, uses, how they end, the listing, and what
the rule refuses."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import audit_kinds, post
from tests.conftest import Gate
from tests.support import config as cfg


def approve_with(gate: Gate, args: dict[str, Any], grant: dict[str, Any]) -> Any:
    req = gate.submit(tool_name="release_app", tool_args=args)["request"]
    body = {"verdict": "approve", "grant": grant}
    return req, post(gate, cfg.ALICE, f"/v1/requests/{req['id']}/decision", body)


def test_a_pattern_grant_with_uses_counts_down_and_ends_used_up(ruled: Gate) -> None:
    grant = {"scope": "pattern", "duration": "30m", "uses": 2, "pin": ["channel"]}
    req, r = approve_with(ruled, {"repo": "web", "channel": "beta", "tag": "v1"}, grant)
    assert r.status_code == 200, r.text
    with ruled.client(cfg.BOB) as c:
        (listed,) = c.get("/v1/grants").json()
    assert listed["pinned"] == {"repo": "web", "channel": "beta"}
    assert (listed["uses"], listed["max_uses"], listed["uses_left"]) == (0, 2, 2)

    first = ruled.submit(tool_name="release_app", tool_args={"repo": "web", "channel": "beta"})
    assert first["decision"] == "allow" and "use 1 of 2" in first["reason"], first
    other = ruled.submit(tool_name="release_app", tool_args={"repo": "web", "channel": "stable"})
    assert other["decision"] == "ask"  # alice pinned the channel too
    second = ruled.submit(tool_name="release_app", tool_args={"repo": "web", "channel": "beta"})
    assert second["decision"] == "allow" and "use 2 of 2" in second["reason"]
    third = ruled.submit(tool_name="release_app", tool_args={"repo": "web", "channel": "beta"})
    assert third["decision"] == "ask"  # used up

    with ruled.client(cfg.BOB) as c:
        assert c.get("/v1/grants").json() == []
        (ended,) = c.get("/v1/grants", params={"active": "false"}).json()
    assert (ended["status"], ended["uses"], ended["uses_left"]) == ("used_up", 2, 0)
    assert ended["ended_at"] is not None
    kinds = audit_kinds(ruled, req["id"])
    assert kinds[-2:] == ["grant_created", "grant_used_up"], kinds
    with ruled.client(cfg.BOB) as c:  # a used-up grant cannot be revoked: it already ended
        assert c.post(f"/v1/grants/{ended['id']}/revoke").status_code == 409


def test_a_single_use_call_grant(ruled: Gate) -> None:
    args = {"repo": "api"}
    _, r = approve_with(ruled, args, {"scope": "call", "duration": "10m", "uses": 1})
    assert r.status_code == 200, r.text
    assert ruled.submit(tool_name="release_app", tool_args=args)["decision"] == "allow"
    assert ruled.submit(tool_name="release_app", tool_args=args)["decision"] == "ask"


def test_without_uses_a_grant_takes_the_rules_most(ruled: Gate) -> None:
    approve_with(ruled, {"repo": "x"}, {"scope": "pattern", "duration": "10m"})
    with ruled.client(cfg.BOB) as c:
        (listed,) = c.get("/v1/grants").json()
    assert (listed["max_uses"], listed["uses_left"], listed["pinned"]) == (5, 5, {"repo": "x"})


def test_a_revoked_counted_grant_says_so(ruled: Gate) -> None:
    approve_with(ruled, {"repo": "x"}, {"scope": "pattern", "duration": "10m", "uses": 3})
    assert ruled.submit(tool_name="release_app", tool_args={"repo": "x"})["decision"] == "allow"
    with ruled.client(cfg.BOB) as c:
        (listed,) = c.get("/v1/grants").json()
        revoked = c.post(f"/v1/grants/{listed['id']}/revoke").json()
    assert (revoked["status"], revoked["uses"], revoked["uses_left"]) == ("revoked", 1, 2)
    assert ruled.submit(tool_name="release_app", tool_args={"repo": "x"})["decision"] == "ask"


def code_of(response: Any) -> str:
    assert response.status_code == 422, response.text
    return str(response.json()["error"]["code"])


def test_what_the_rule_refuses(ruled: Gate) -> None:
    args = {"repo": "web", "tag": "v1"}
    cases = [
        ({"scope": "pattern", "duration": "10m", "uses": 6}, "grant_too_many_uses"),
        ({"scope": "call", "duration": "10m", "pin": ["tag"]}, "invalid_input"),
        ({"scope": "pattern", "duration": "10m", "pin": ["nope"]}, "grant_not_offered"),
        ({"scope": "session", "duration": "10m"}, "grant_not_offered"),
        ({"scope": "pattern", "duration": "2h"}, "grant_too_long"),
    ]
    for grant, code in cases:
        _, r = approve_with(ruled, args, grant)
        assert code_of(r) == code, grant
    # a call without the argument the rule pins cannot have a pattern grant
    _, r = approve_with(ruled, {"tag": "v1"}, {"scope": "pattern", "duration": "10m"})
    assert code_of(r) == "grant_not_offered"
    # zero uses is not a grant: the body's schema refuses it
    _, r = approve_with(ruled, args, {"scope": "pattern", "duration": "10m", "uses": 0})
    assert r.status_code == 422
    # a rule without pattern grants refuses one
    req = ruled.submit(tool_name="shell_exec", tool_args={"cmd": "ls"})["request"]
    body = {"verdict": "approve", "grant": {"scope": "pattern", "duration": "10m"}}
    assert code_of(post(ruled, cfg.ALICE, f"/v1/requests/{req['id']}/decision", body)) == (
        "grant_not_offered"
    )
