"""Approving with edits binds the edited call; rules may forbid edits; an approval never
replays for other arguments; preset reject reasons reach the model."""

from __future__ import annotations

from gate.asking.binding import call_hash
from tests.api.conftest import post
from tests.conftest import Gate
from tests.support import config as cfg

# -- approve with edits ---------------------------------------------------------------------


def test_approve_with_edits_binds_the_edited_call(ruled: Gate) -> None:
    req = ruled.submit(
        tool_name="refund_customer",
        tool_args={"customer": "c1", "amount": 900},
        idempotency_key="toolu_refund",
    )["request"]
    edited = {"customer": "c1", "amount": 500}
    r = post(
        ruled,
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
    with ruled.client(cfg.ADMIN) as c:
        events = c.get(f"/v1/requests/{req['id']}/audit").json()
    assert events[-1]["detail"]["edits"] == {"amount": {"from": 900, "to": 500}}


def test_rules_can_forbid_edits(ruled: Gate) -> None:
    for tool in ("strict_thing", "wire_money"):  # forbidden outright; quorum rule
        req = ruled.submit(tool_name=tool, tool_args={"a": 1})["request"]
        r = post(
            ruled,
            cfg.ALICE,
            f"/v1/requests/{req['id']}/decision",
            {"verdict": "approve", "edited_args": {"a": 2}},
        )
        assert r.status_code == 422
        assert r.json()["error"]["code"] == "edits_not_allowed"


# -- binding --------------------------------------------------------------------------------


def test_an_approval_never_replays_for_other_arguments(ruled: Gate) -> None:
    first = ruled.submit(
        tool_name="pay_vendor", tool_args={"amount": 60000}, idempotency_key="toolu_X"
    )["request"]
    post(ruled, cfg.ALICE, f"/v1/requests/{first['id']}/decision", {"verdict": "approve"})
    same = ruled.submit(
        tool_name="pay_vendor", tool_args={"amount": 60000}, idempotency_key="toolu_X"
    )["request"]
    assert same["id"] == first["id"] and same["status"] == "approved"
    with ruled.client(cfg.AGENT) as c:
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


def test_preset_reject_reasons_reach_the_model(ruled: Gate) -> None:
    req = ruled.submit(tool_name="refund_customer", tool_args={"amount": 1})["request"]
    bad = post(
        ruled,
        cfg.ALICE,
        f"/v1/requests/{req['id']}/decision",
        {"verdict": "reject", "reasons": ["because"]},
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "unknown_reason"
    r = post(
        ruled,
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
