"""The walkthrough from the README, over HTTP: submit, wait, approve, see the verdict."""

from __future__ import annotations

import threading

from tests.conftest import Gate
from tests.support import config as cfg


def test_submit_wait_approve(gate: Gate) -> None:
    answer = gate.submit(
        tool_name="pay_vendor",
        tool_args={"amount": 60000},
        user_id="dave",
        idempotency_key="toolu_01",
    )
    assert answer["decision"] == "ask"
    assert answer["rule"] == "big-payments"
    request = answer["request"]
    assert request["status"] == "pending"
    assert request["approvers"] == ["alice", "bob"]

    seen: dict[str, object] = {}

    def waiter() -> None:
        with gate.client(cfg.AGENT) as c:
            seen.update(c.get(f"/v1/requests/{request['id']}/wait", params={"timeout": 20}).json())

    t = threading.Thread(target=waiter)
    t.start()
    r = gate.decide(request["id"], cfg.ALICE, "approve", "fine")
    assert r.status_code == 200, r.text
    t.join(10)
    assert seen["status"] == "approved"
    assert seen["decided_by"] == "alice"
    assert seen["reason"] == "Approved by alice in the API: fine"
