"""An idempotency key finds its earlier request only for the very same call, and never hands
back an approval whose call was reported run (the payment that would run twice)."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import post
from tests.conftest import Gate
from tests.support import config as cfg

CALL: dict[str, Any] = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}}


def _ask(gate: Gate, **body: Any) -> Any:
    with gate.client(cfg.AGENT) as c:
        return c.post("/v1/gate", json=body)


def test_the_same_key_with_another_agent_user_or_session_is_a_409(ruled: Gate) -> None:
    first = ruled.submit(**CALL, idempotency_key="k-who", user_id="ann", session_id="s1")
    assert first["decision"] == "ask"
    for change in ({"user_id": "bob"}, {"session_id": "s2"}, {"agent_id": "other-agent"}):
        body = {**CALL, "idempotency_key": "k-who", "user_id": "ann", "session_id": "s1"}
        r = _ask(ruled, **{**body, **change})
        assert r.status_code == 409, (change, r.text)
        assert r.json()["error"]["code"] == "idempotency_key_reused"
    same = _ask(ruled, **CALL, idempotency_key="k-who", user_id="ann", session_id="s1")
    assert same.status_code == 200 and same.json()["request"]["id"] == first["request"]["id"]


def test_an_approval_is_spent_once_its_call_is_reported_run(ruled: Gate) -> None:
    first = ruled.submit(**CALL, idempotency_key="k-pay")["request"]
    post(ruled, cfg.ALICE, f"/v1/requests/{first['id']}/decision", {"verdict": "approve"})
    # a retry before the call ran is the same approval (the key's purpose)
    retry = _ask(ruled, **CALL, idempotency_key="k-pay")
    assert retry.status_code == 200 and retry.json()["request"]["status"] == "approved"
    ran = post(ruled, cfg.AGENT, f"/v1/requests/{first['id']}/outcome", {"outcome": "ran"})
    assert ran.status_code == 200, ran.text

    again = _ask(ruled, **CALL, idempotency_key="k-pay")

    assert again.status_code == 409
    assert again.json()["error"]["code"] == "approval_spent"
    assert first["id"] in again.json()["error"]["message"]


def test_an_approval_whose_call_did_not_run_is_not_spent(ruled: Gate) -> None:
    first = ruled.submit(**CALL, idempotency_key="k-not-run")["request"]
    post(ruled, cfg.ALICE, f"/v1/requests/{first['id']}/decision", {"verdict": "approve"})
    told = post(ruled, cfg.AGENT, f"/v1/requests/{first['id']}/outcome", {"outcome": "not_run"})
    assert told.status_code == 200, told.text
    again = _ask(ruled, **CALL, idempotency_key="k-not-run")
    assert again.status_code == 200 and again.json()["request"]["id"] == first["id"]
