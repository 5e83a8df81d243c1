"""The approval promise under attack: who may let a call through, and policy failing closed.

Each test is one class of hole, shown against the real app over HTTP (uvicorn in a thread,
configured from the settings a gate.toml gives), on SQLite and on PostgreSQL: grants that
reach beyond their rule or their principal, idempotency keys shared between agents,
self-approval under another name, approvals after the deadline, and `when` guards that error
or are not booleans.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate.config.settings import Settings
from tests.conftest import GateFactory
from tests.support import config as cfg
from tests.support.http import TLS

#: an agent token that belongs to approver alice (her own agent)
ALICE_AGENT = "tok-agent-alice-laptop"

TRUST_RULES: list[dict[str, Any]] = [
    {
        # lenient: anyone may approve small refunds, grants on offer
        "name": "small-refunds",
        "tools": ["refund"],
        "when": "args.amount <= 100",
        "timeout": "10m",
        "grant_scopes": ["call", "session", "agent"],
        "max_grant": "1h",
    },
    {
        # strict: the same tool, bigger amounts, finance only with a quorum of two
        "name": "big-refunds",
        "tools": ["refund"],
        "when": "args.amount > 100",
        "approvers": ["group:finance"],
        "approvals_required": 2,
        "timeout": "10m",
        "grant_scopes": ["call", "session", "agent"],
        "max_grant": "1h",
    },
    {
        # same approvers and quorum as small-refunds, but another rule
        "name": "other-lenient",
        "tools": ["chargeback"],
        "timeout": "10m",
        "grant_scopes": ["agent"],
    },
    {"name": "quick", "tools": ["quick_*"], "timeout": "1s"},
    {"name": "quick-lenient", "tools": ["lenient_quick"], "timeout": "1s", "on_timeout": "approve"},
    {"name": "editable", "tools": ["transfer"], "timeout": "10m", "editable": ["amount"]},
    # `when` guards that fail at run time: every one must fail closed
    {"name": "div-zero", "tools": ["divz"], "when": "args.amount / args.count > 10"},
    {"name": "overflow", "tools": ["ovf"], "when": "args.n + 9223372036854775807 > 0"},
    {"name": "bad-regex", "tools": ["rgx"], "when": "args.s.matches(args.pattern)"},
    {"name": "not-bool", "tools": ["nb"], "when": "args.flag"},
    {"name": "allow-guard", "tools": ["ag"], "when": "args.amount / args.count > 10",
     "action": "allow"},
    {"name": "deny-guard", "tools": ["dg"], "when": "int(args.s) > 5", "action": "deny"},
]  # fmt: skip


@pytest.fixture
def served(db_url: str, make_gate: GateFactory) -> str:
    """The real app with the standard approvers and tokens plus the rules above.

    The sweep is slowed to once an hour so deadline tests see requests that are past due
    but not yet expired by the sweep.
    """
    data = cfg.settings_data(db_url, sweep_interval_seconds=3600)
    data["rules"] = TRUST_RULES + data["rules"]
    data["approvers"][0]["email"] = "alice@example.com"
    data["tokens"].append(
        {"name": "alice-laptop", "role": "agent", "token": ALICE_AGENT, "approver": "alice"}
    )
    return make_gate(settings=Settings(**data)).url


def _call(url: str, token: str, method: str, path: str, body: Any = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.request(method, url + path, json=body, headers=headers, timeout=30, verify=TLS)


def ask(url: str, token: str = cfg.AGENT, **body: Any) -> dict[str, Any]:
    r = _call(url, token, "POST", "/v1/gate", body)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def decide(
    url: str, rid: str, token: str, verdict: str = "approve", **extra: Any
) -> httpx.Response:
    return _call(url, token, "POST", f"/v1/requests/{rid}/decision", {"verdict": verdict, **extra})


def status_of(url: str, rid: str) -> str:
    r = _call(url, cfg.ADMIN, "GET", f"/v1/requests/{rid}")
    assert r.status_code == 200, r.text
    return str(r.json()["status"])


# -- 1. grants stay inside the rule they were granted under ----------------------------------


def test_a_grant_from_a_lenient_rule_does_not_cover_a_stricter_rule(served: str) -> None:
    first = ask(served, tool_name="refund", tool_args={"amount": 50}, agent_id="bot")
    r = decide(
        served, first["request"]["id"], cfg.ALICE, grant={"scope": "agent", "duration": "30m"}
    )
    assert r.status_code == 200, r.text
    # the same agent, the same tool, under the lenient rule: the grant lets it through
    again = ask(served, tool_name="refund", tool_args={"amount": 60}, agent_id="bot")
    assert again["decision"] == "allow"
    assert again["request"]["decided_via"] == "grant"
    # a bigger amount matches the strict rule (finance, quorum of 2): the grant must not reach
    big = ask(served, tool_name="refund", tool_args={"amount": 90000}, agent_id="bot")
    assert big["decision"] == "ask", big
    assert big["rule"] == "big-refunds"
    assert big["request"]["status"] == "pending"
    # another rule with the same approvers and quorum is still another rule
    other = ask(served, tool_name="chargeback", tool_args={"amount": 5}, agent_id="bot")
    assert other["decision"] == "ask"


def test_a_quorum_rules_grant_needs_every_approving_vote(served: str) -> None:
    body = {"tool_name": "refund", "tool_args": {"amount": 5000}, "agent_id": "bot"}
    # alice approves with a grant, bob approves without one: no grant
    rid = ask(served, **body)["request"]["id"]
    assert (
        decide(served, rid, cfg.ALICE, grant={"scope": "agent", "duration": "30m"}).status_code
        == 200
    )
    r = decide(served, rid, cfg.BOB)
    assert r.status_code == 200 and r.json()["status"] == "approved", r.text
    assert ask(served, **{**body, "tool_args": {"amount": 5001}})["decision"] == "ask"
    grants = _call(served, cfg.ADMIN, "GET", "/v1/grants").json()
    assert grants == []
    # both choose one (different lengths): the grant is the shorter, and it covers the rule
    rid = ask(served, **{**body, "tool_args": {"amount": 6000}})["request"]["id"]
    decide(served, rid, cfg.ALICE, grant={"scope": "agent", "duration": "45m"})
    r = decide(served, rid, cfg.BOB, grant={"scope": "agent", "duration": "20m"})
    assert r.status_code == 200, r.text
    grants = _call(served, cfg.ADMIN, "GET", "/v1/grants").json()
    assert len(grants) == 1 and grants[0]["scope"] == "agent"
    assert grants[0]["request_id"] == rid
    later = ask(served, **{**body, "tool_args": {"amount": 7000}})
    assert later["decision"] == "allow" and later["request"]["decided_via"] == "grant"


# -- 2. grants belong to who asked, not to what the caller claims ---------------------------


@pytest.mark.parametrize(
    ("scope", "claims"),
    [
        ("agent", {"agent_id": "bot"}),
        ("session", {"session_id": "sess-1"}),
        ("call", {}),
    ],
)
def test_another_token_claiming_the_same_ids_does_not_ride_a_grant(
    served: str, scope: str, claims: dict[str, str]
) -> None:
    body = {"tool_name": "refund", "tool_args": {"amount": 10}, **claims}
    rid = ask(served, **body)["request"]["id"]
    r = decide(served, rid, cfg.ALICE, grant={"scope": scope, "duration": "30m"})
    assert r.status_code == 200, r.text
    # the hostile agent sends the very same call and ids with its own token
    hostile = ask(served, token=cfg.OTHER_AGENT, **body)
    assert hostile["decision"] == "ask" and hostile["request"]["status"] == "pending"
    # the agent that was granted still rides it
    assert ask(served, **body)["decision"] == "allow"


# -- 3. idempotency keys are per principal -------------------------------------------------


def test_a_known_idempotency_key_from_another_token_is_a_new_request(served: str) -> None:
    body = {"tool_name": "refund", "tool_args": {"amount": 10}, "idempotency_key": "toolu_1"}
    mine = ask(served, **body)["request"]
    assert decide(served, mine["id"], cfg.ALICE).status_code == 200
    # the same key and call from another agent: its own pending request, never the approval
    theirs = ask(served, token=cfg.OTHER_AGENT, **body)["request"]
    assert theirs["id"] != mine["id"]
    assert theirs["status"] == "pending"
    # and asking again under its own key finds its own request, not the first agent's
    assert ask(served, token=cfg.OTHER_AGENT, **body)["request"]["id"] == theirs["id"]
    assert ask(served, **body)["request"]["id"] == mine["id"]
    r = _call(served, cfg.OTHER_AGENT, "GET", f"/v1/requests/{mine['id']}")
    assert r.status_code == 403


# -- 4. nobody approves their own call, under any of their names ----------------------------


def test_an_admin_token_cannot_approve_what_it_submitted(served: str) -> None:
    rid = ask(served, token=cfg.ADMIN, tool_name="ask_anything", tool_args={})["request"]["id"]
    r = decide(served, rid, cfg.ADMIN)
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "self_approval"
    assert status_of(served, rid) == "pending"
    assert decide(served, rid, cfg.ALICE).status_code == 200


@pytest.mark.parametrize(
    "user_id",
    # each identity as configured, and as a hostile agent would vary it: letter case, spaces
    ["alice", "alice@example.com", "U0ALICE", "ou_alice", "ALICE", "Alice@Example.COM", " alice "],
)
def test_the_requester_is_refused_under_each_of_their_identities(served: str, user_id: str) -> None:
    rid = ask(served, tool_name="ask_x", tool_args={}, user_id=user_id)["request"]["id"]
    r = decide(served, rid, cfg.ALICE)
    assert r.status_code == 403 and r.json()["error"]["code"] == "self_approval", r.text
    assert status_of(served, rid) == "pending"


def test_an_approver_cannot_approve_what_their_own_agent_token_asked(served: str) -> None:
    # alice's own agent token asks with no user_id at all: the token says who asked
    rid = ask(served, token=ALICE_AGENT, tool_name="ask_x", tool_args={})["request"]["id"]
    r = decide(served, rid, cfg.ALICE)
    assert r.status_code == 403 and r.json()["error"]["code"] == "self_approval", r.text
    # and extending it is refused too
    r = _call(served, cfg.ALICE, "POST", f"/v1/requests/{rid}/extend", {"by": "5m"})
    assert r.status_code == 403, r.text
    assert decide(served, rid, cfg.BOB).status_code == 200


# -- 5. a request whose deadline has passed cannot be approved -------------------------------


@pytest.mark.parametrize("tool", ["quick_pay", "lenient_quick"])
def test_no_approval_after_the_deadline_even_before_the_sweep(served: str, tool: str) -> None:
    rid = ask(served, tool_name=tool, tool_args={})["request"]["id"]
    time.sleep(1.3)  # the rule's 1 s deadline passes; the sweep runs only hourly here
    r = decide(served, rid, cfg.ALICE, "reject", comment="too late")
    assert r.status_code == 409, r.text
    body = r.json()["error"]
    # the deadline is applied as the rule says: expired, or approved by timeout
    expected = "approved" if tool == "lenient_quick" else "expired"
    assert body["code"] == "already_decided" and body["status"] == expected
    assert body["decided_via"] == "timeout"
    r = _call(served, cfg.ALICE, "POST", f"/v1/requests/{rid}/extend", {"by": "5m"})
    assert r.status_code == 409, r.text
    assert status_of(served, rid) == expected


def test_approving_a_past_due_request_expires_it(served: str) -> None:
    rid = ask(served, tool_name="quick_pay", tool_args={})["request"]["id"]
    time.sleep(1.3)
    r = decide(served, rid, cfg.ALICE)
    assert r.status_code == 409 and r.json()["error"]["status"] == "expired", r.text
    wait = _call(served, cfg.AGENT, "GET", f"/v1/requests/{rid}/wait?timeout=1").json()
    assert wait["status"] == "expired"


# -- what a rule offers is enforced on the server ------------------------------------------


def test_edits_outside_the_rules_editable_keys_are_refused(served: str) -> None:
    args = {"amount": 900, "to": "acct-1"}
    rid = ask(served, tool_name="transfer", tool_args=args)["request"]["id"]
    r = decide(served, rid, cfg.ALICE, edited_args={"amount": 900, "to": "acct-evil"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "edit_not_offered", r.text
    assert status_of(served, rid) == "pending"
    r = decide(served, rid, cfg.ALICE, edited_args={"amount": 500, "to": "acct-1"})
    assert r.status_code == 200 and r.json()["approved_args"]["amount"] == 500, r.text


# -- 7. policy fails closed on any `when` error --------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args", "decision", "rule"),
    [
        ("divz", {"amount": 5, "count": 0}, "ask", "div-zero"),  # division by zero
        ("ovf", {"n": 10}, "ask", "overflow"),  # integer overflow
        ("rgx", {"s": "x", "pattern": "("}, "ask", "bad-regex"),  # regex from the arguments
        ("nb", {"flag": 60000}, "ask", "not-bool"),  # a guard that is not a boolean
        ("nb", {"flag": "yes"}, "ask", "not-bool"),
        ("dg", {"s": "not a number"}, "deny", "deny-guard"),  # deny rules match
        # an allow rule whose guard fails is skipped: no rule matched (not "allow-guard")
        ("ag", {"amount": 5, "count": 0}, "allow", None),
    ],
)
def test_a_failing_when_fails_closed_and_never_500s(
    served: str, tool: str, args: dict[str, Any], decision: str, rule: str | None
) -> None:
    r = _call(served, cfg.AGENT, "POST", "/v1/gate", {"tool_name": tool, "tool_args": args})
    assert r.status_code == 200, r.text
    assert (r.json()["decision"], r.json()["rule"]) == (decision, rule)


def test_a_when_that_can_never_be_a_boolean_is_refused_at_start(tmp_path: Path) -> None:
    data = cfg.settings_data(f"sqlite:///{tmp_path / 'g.db'}")
    data["rules"] = [{"name": "sum", "tools": ["pay"], "when": "args.amount + 1"}]
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml(data))
    for command in (["policy", "check"], ["serve", "--port", "0"]):
        done = subprocess.run(
            [sys.executable, "-m", "gate.cli", *command, "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert "Traceback" not in done.stderr
        assert 'rule "sum"' in done.stderr and "true or false" in done.stderr, done.stderr
