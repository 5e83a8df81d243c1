"""Deciding: concurrency, quorum, self-approval, finished requests, cancel, expiry races."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import httpx
import sqlalchemy as sa

from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg


def _terminal_audits(gate: Gate, request_id: str) -> list[tuple[str, str | None]]:
    with gate.state.db.read() as s:
        rows = s.execute(
            sa.text(
                "SELECT kind, actor FROM audit_event WHERE request_id = :id "
                "AND kind IN ('approved', 'rejected', 'expired', 'cancelled')"
            ),
            {"id": request_id},
        )
        return [(r[0], r[1]) for r in rows]


def test_fifty_conflicting_decisions_have_one_winner(make_gate: GateFactory, db_url: str) -> None:
    data = cfg.settings_data(db_url, db_pool_size=20)
    people = [f"p{i:02d}" for i in range(50)]
    data["approvers"] += [{"name": p} for p in people]
    data["tokens"] += [
        {"name": p, "role": "approver", "token": f"tok-{p}", "approver": p} for p in people
    ]
    gate = make_gate(settings=Settings(**data))
    request = gate.submit(tool_name="ask_anything", tool_args={"x": 1})["request"]
    barrier = threading.Barrier(len(people))

    def vote(i: int) -> httpx.Response:
        with gate.client(f"tok-{people[i]}") as c:
            barrier.wait()
            return c.post(
                f"/v1/requests/{request['id']}/decision",
                json={"verdict": "approve" if i % 2 else "reject", "comment": f"vote {i}"},
            )

    with ThreadPoolExecutor(len(people)) as pool:
        responses = list(pool.map(vote, range(len(people))))

    winners = [r for r in responses if r.status_code == 200]
    losers = [r for r in responses if r.status_code == 409]
    assert len(winners) == 1 and len(losers) == 49, [r.status_code for r in responses]
    final = winners[0].json()
    assert final["status"] in ("approved", "rejected")
    for loser in losers:
        err = loser.json()["error"]
        assert err["code"] == "already_decided"
        assert err["decided_by"] == final["decided_by"]
        assert err["status"] == final["status"]
        assert final["decided_by"] in err["message"]
    assert _terminal_audits(gate, request["id"]) == [(final["status"], final["decided_by"])]


def test_quorum_of_two_counts_distinct_people(gate: Gate) -> None:
    request = gate.submit(tool_name="wire_funds", tool_args={"to": "acme"})["request"]
    assert request["approvals_required"] == 2

    first = gate.decide(request["id"], cfg.ALICE)
    assert first.status_code == 200
    assert first.json()["status"] == "pending"
    assert [v["approver"] for v in first.json()["votes"]] == ["alice"]

    again = gate.decide(request["id"], cfg.ALICE)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "already_voted"

    second = gate.decide(request["id"], cfg.BOB, comment="two of two")
    assert second.status_code == 200
    body = second.json()
    assert body["status"] == "approved"
    assert body["decided_by"] == "bob"
    assert sorted(v["approver"] for v in body["votes"]) == ["alice", "bob"]


def test_concurrent_quorum_votes_are_both_counted(gate: Gate) -> None:
    """Two approvers voting at the same instant: the second must see the first's vote."""
    for _ in range(5):
        request = gate.submit(tool_name="wire_funds", tool_args={})["request"]
        barrier = threading.Barrier(2)

        def vote(token: str, rid: str = request["id"], barrier: Any = barrier) -> int:
            with gate.client(token) as c:
                barrier.wait()
                return c.post(
                    f"/v1/requests/{rid}/decision", json={"verdict": "approve"}
                ).status_code

        with ThreadPoolExecutor(2) as pool:
            codes = list(pool.map(vote, [cfg.ALICE, cfg.BOB]))
        assert codes == [200, 200]
        with gate.client(cfg.ADMIN) as c:
            assert c.get(f"/v1/requests/{request['id']}").json()["status"] == "approved"


def test_one_reject_rejects_a_quorum_request(gate: Gate) -> None:
    request = gate.submit(tool_name="wire_funds", tool_args={})["request"]
    assert gate.decide(request["id"], cfg.ALICE).json()["status"] == "pending"
    r = gate.decide(request["id"], cfg.BOB, "reject", "wrong account")
    assert r.json()["status"] == "rejected"
    assert r.json()["reason"] == "Rejected by bob in the API: wrong account"


def test_requester_cannot_approve_own_request(gate: Gate) -> None:
    for user_id in ("alice", "U0ALICE", "ou_alice"):
        request = gate.submit(tool_name="pay_vendor", tool_args={"amount": 90000}, user_id=user_id)[
            "request"
        ]
        r = gate.decide(request["id"], cfg.ALICE)
        assert r.status_code == 403
        assert r.json()["error"]["code"] == "self_approval"
        assert gate.decide(request["id"], cfg.BOB).json()["status"] == "approved"


def test_only_the_rules_approvers_decide(gate: Gate) -> None:
    request = gate.submit(tool_name="pay_vendor", tool_args={"amount": 90000})["request"]
    r = gate.decide(request["id"], cfg.CAROL)
    assert r.status_code == 403
    assert r.json()["error"] == {
        "code": "not_an_approver",
        "message": "You are not an approver for this rule",
    }
    with gate.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{request['id']}").json()["status"] == "pending"


def test_decision_on_finished_request_says_who_and_when(gate: Gate) -> None:
    request = gate.submit(tool_name="pay_vendor", tool_args={"amount": 90000})["request"]
    gate.decide(request["id"], cfg.ALICE, "reject", "no")
    r = gate.decide(request["id"], cfg.BOB)
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "already_decided"
    assert err["status"] == "rejected" and err["decided_by"] == "alice"
    assert err["message"].startswith("Already rejected by alice at ")


def test_cancel_by_the_agent_wakes_the_waiter(gate: Gate) -> None:
    request = gate.submit(tool_name="pay_vendor", tool_args={"amount": 90000})["request"]
    with gate.client(cfg.OTHER_AGENT) as c:
        r = c.post(f"/v1/requests/{request['id']}/cancel")
        assert r.status_code == 403 and r.json()["error"]["code"] == "not_your_request"
    result: dict[str, Any] = {}

    def wait() -> None:
        with gate.client(cfg.AGENT) as c:
            result.update(
                c.get(f"/v1/requests/{request['id']}/wait", params={"timeout": 20}).json()
            )

    t = threading.Thread(target=wait)
    t.start()
    with gate.client(cfg.AGENT) as c:
        r = c.post(f"/v1/requests/{request['id']}/cancel", json={"reason": "user stopped"})
        assert r.status_code == 200
        assert r.json()["status"] == "cancelled"
        assert c.post(f"/v1/requests/{request['id']}/cancel").status_code == 409
    t.join(10)
    assert result["status"] == "cancelled"
    assert result["reason"] == "Cancelled by billing-agent: user stopped"


def test_wait_returns_pending_at_its_timeout(gate: Gate) -> None:
    request = gate.submit(tool_name="pay_vendor", tool_args={"amount": 90000})["request"]
    with gate.client(cfg.AGENT) as c:
        r = c.get(f"/v1/requests/{request['id']}/wait", params={"timeout": 0.3})
    assert r.status_code == 200
    assert r.json()["status"] == "pending"


def test_expiry_rejects_by_default_and_wakes_the_waiter(gate: Gate) -> None:
    request = gate.submit(tool_name="ephemeral_task", tool_args={})["request"]
    with gate.client(cfg.AGENT) as c:
        body = c.get(f"/v1/requests/{request['id']}/wait", params={"timeout": 20}).json()
    assert body["status"] == "expired"
    assert body["decided_via"] == "timeout"
    assert "Nobody answered within 1s" in body["reason"]
    assert _terminal_audits(gate, request["id"]) == [("expired", None)]


def test_expiry_approves_when_the_rule_says_so(gate: Gate) -> None:
    request = gate.submit(tool_name="lenient_task", tool_args={})["request"]
    with gate.client(cfg.AGENT) as c:
        body = c.get(f"/v1/requests/{request['id']}/wait", params={"timeout": 20}).json()
    assert body["status"] == "approved"
    assert body["decided_by"] == "gate" and body["decided_via"] == "timeout"


class ManualClock:
    """A clock the test moves; the app's sweep and deadlines read it."""

    def __init__(self) -> None:
        from gate.base.statuses import utcnow

        self.now = utcnow()

    def __call__(self) -> Any:
        return self.now


def test_decision_racing_the_sweep_yields_one_outcome(make_gate: GateFactory, db_url: str) -> None:
    from gate.app import create_app
    from tests.conftest import Gate as GateCls
    from tests.support.servers import ThreadServer

    clock = ManualClock()
    settings = cfg.make_settings(db_url, sweep_interval_seconds=3600)
    server = ThreadServer(create_app(settings, clock=clock)).start()
    try:
        gate = GateCls(server, settings)
        ids = [
            gate.submit(tool_name="pay_vendor", tool_args={"amount": 60001})["request"]["id"]
            for _ in range(20)
        ]
        clock.now += timedelta(minutes=11)  # every deadline (10m) has passed; no sweep yet
        barrier = threading.Barrier(2)

        def sweep() -> int:
            barrier.wait()
            return gate.state.service.expire_due()

        def decide_all() -> list[int]:
            barrier.wait()
            return [gate.decide(i, cfg.ALICE).status_code for i in ids]

        with ThreadPoolExecutor(2) as pool:
            swept = pool.submit(sweep)
            decided = pool.submit(decide_all)
            expired_count, codes = swept.result(), decided.result()
        with gate.client(cfg.ADMIN) as c:
            statuses = [c.get(f"/v1/requests/{i}").json()["status"] for i in ids]
        # A decision that reaches a request before the sweep applies its deadline itself
        # (409, expired): the sweep counts only the ones it expired.
        assert set(statuses) <= {"approved", "expired"}
        assert expired_count <= statuses.count("expired")
        assert codes.count(200) == statuses.count("approved")
        assert set(codes) <= {200, 409}
        for rid, status, code in zip(ids, statuses, codes, strict=True):
            assert status == ("approved" if code == 200 else "expired")
            assert len(_terminal_audits(gate, rid)) == 1
    finally:
        server.stop()


def test_idempotency_key_returns_the_same_request(gate: Gate) -> None:
    body = {
        "tool_name": "pay_vendor",
        "tool_args": {"amount": 70000},
        "idempotency_key": "toolu_same",
    }

    def submit(_: int) -> str:
        return str(gate.submit(**body)["request"]["id"])

    with ThreadPoolExecutor(10) as pool:
        ids = set(pool.map(submit, range(10)))
    assert len(ids) == 1
    with gate.state.db.read() as s:
        assert s.execute(sa.text("SELECT count(*) FROM confirmation_request")).scalar() == 1
