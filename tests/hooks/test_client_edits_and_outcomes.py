"""The Python SDK beyond yes/no, against a live gate: edits as `modified_args` and as the
arguments `@require_approval` calls with, outcome records, session cancel."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gate.client import (
    ApprovalDenied,
    GateClient,
    HookContext,
    PreToolUseHook,
    Verdict,
    require_approval,
)
from tests.conftest import Gate
from tests.hooks.test_client import Decider
from tests.support import config as cfg
from tests.support.servers import wait_until


class Approver(Decider):
    """Decides the next pending request for a tool from another thread, through the SDK, with
    the decision's extras (edited_args, grant, reasons)."""

    def __init__(self, gate: Gate, tool: str, token: str, verdict: str, **extras: Any) -> None:
        self.extras = extras
        self.decided: dict[str, Any] = {}
        super().__init__(gate, tool, token, verdict)

    def _run(self) -> None:
        self.request = wait_until(self._pending, 20)
        token, verdict, _ = self.args
        with GateClient(self.gate.url, token) as person:
            self.decided = person.decide(self.request["id"], verdict, **self.extras)  # type: ignore[arg-type]

    def join(self) -> dict[str, Any]:
        super().join()
        return self.decided


@pytest.fixture
def client(gate_sqlite: Gate) -> Iterator[GateClient]:
    c = GateClient(gate_sqlite.url, cfg.AGENT, agent_id="billing", timeout=20)
    yield c
    c.close()


def test_edits_come_back_as_modified_args(gate_sqlite: Gate, client: GateClient) -> None:
    edited = {"amount": 60000, "vendor": "acme"}
    person = Approver(
        gate_sqlite, "pay_vendor", cfg.ALICE, "approve", edited_args=edited, comment="cap it"
    )

    result = PreToolUseHook(client)(
        HookContext(
            "pay_vendor", {"amount": 90000, "vendor": "acme"}, metadata={"tool_call_id": "c9"}
        )
    )

    decided = person.join()
    assert result.allow
    assert result.modified_args == edited
    assert result.side_effects == [
        f"gate: approved (request {decided['id']}): gate: Approved with edits by alice in the "
        "API: cap it Changed: amount 90000 -> 60000. The pay_vendor call runs with the "
        "arguments as the approver edited them, not as they were sent."
    ]


def test_require_approval_calls_the_function_with_the_edited_arguments(
    gate_sqlite: Gate, client: GateClient
) -> None:
    calls: list[tuple[int, str, object]] = []
    marker = object()  # not JSON: unchanged arguments keep their Python objects

    @require_approval(client=client, tool_name="pay_vendor")
    def pay(amount: int, vendor: str, note: object = marker) -> str:
        calls.append((amount, vendor, note))
        return "paid"

    person = Approver(
        gate_sqlite,
        "pay_vendor",
        cfg.BOB,
        "approve",
        edited_args={"amount": 55000, "vendor": "acme", "note": repr(marker)},
    )
    assert pay(90000, vendor="acme") == "paid"
    person.join()
    assert calls == [(55000, "acme", marker)]

    person = Approver(gate_sqlite, "pay_vendor", cfg.BOB, "approve", edited_args={"sum": 1})
    with pytest.raises(ApprovalDenied) as refused:
        pay(90000, "acme")
    person.join()
    assert "unknown: ['sum'], removed: ['amount', 'note', 'vendor']" in refused.value.reason
    assert len(calls) == 1


async def test_require_approval_async_uses_the_edits(gate_sqlite: Gate) -> None:
    async with GateClient(gate_sqlite.url, cfg.AGENT, timeout=20) as c:

        @require_approval(client=c, tool_name="pay_vendor")
        async def pay(amount: int) -> int:
            return amount

        person = Approver(
            gate_sqlite, "pay_vendor", cfg.ALICE, "approve", edited_args={"amount": 51000}
        )
        assert await pay(99000) == 51000
        person.join()


def test_record_outcome_completes_the_audit_trail(gate_sqlite: Gate, client: GateClient) -> None:
    person = Approver(gate_sqlite, "pay_vendor", cfg.ALICE, "approve")
    verdict = client.check("pay_vendor", {"amount": 70000})
    person.join()
    assert verdict.allowed and verdict.updated_args is None

    recorded = client.record_outcome(verdict, "ran", "paid, txn 881")

    assert recorded["outcome"] == "ran"
    with gate_sqlite.client(cfg.ADMIN) as c:
        trail = c.get(f"/v1/requests/{verdict.request_id}/audit").json()
    assert [e["kind"] for e in trail] == ["created", "approved", "ran"]
    assert trail[-1]["detail"] == {"summary": "paid, txn 881"}
    # a policy allow made no request: nothing to record, and no error
    assert client.record_outcome(client.check("read_notes", {})) is None


async def test_record_outcome_async_and_cancel_session(gate_sqlite: Gate) -> None:
    async with GateClient(gate_sqlite.url, cfg.AGENT, timeout=20) as c:
        person = Approver(gate_sqlite, "pay_vendor", cfg.BOB, "approve")
        verdict = await c.check_async("pay_vendor", {"amount": 80000})
        person.join()
        done = await c.record_outcome_async(verdict.request_id or "", "failed", "card declined")
        assert done["outcome"] == "failed"
        assert await c.cancel_session_async("no-such-session") == []


def test_cancel_session_withdraws_it_and_the_waiter_is_told(
    gate_sqlite: Gate, client: GateClient
) -> None:
    seen: list[Verdict] = []
    waiter = threading.Thread(
        target=lambda: seen.append(client.check("pay_vendor", {"amount": 61000}, session_id="s-9"))
    )
    waiter.start()
    other = client.submit("pay_vendor", {"amount": 62000}, session_id="s-9")["request"]
    elsewhere = client.submit("pay_vendor", {"amount": 63000}, session_id="s-10")["request"]

    def both_pending() -> bool:
        with gate_sqlite.client(cfg.ADMIN) as c:
            params = {"status": "pending", "session_id": "s-9"}
            return len(c.get("/v1/requests", params=params).json()["items"]) == 2

    wait_until(both_pending, 20)

    cancelled = client.cancel_session("s-9", "the user closed the chat")

    waiter.join(20)
    assert len(cancelled) == 2 and other["id"] in cancelled
    assert seen[0].kind == "cancelled"
    assert seen[0].reason == (
        "gate: The approval request for this pay_vendor call was withdrawn before anyone decided "
        "(Cancelled by billing-agent: the user closed the chat). The call was not run; no human "
        "rejected it."
    )
    assert client.get(elsewhere["id"])["status"] == "pending"


def test_decide_takes_the_extras_and_refuses_unknown_ones(
    gate_sqlite: Gate, client: GateClient
) -> None:
    request = client.submit("pay_vendor", {"amount": 64000})["request"]
    with GateClient(gate_sqlite.url, cfg.ALICE) as person:
        with pytest.raises(TypeError):
            person.decide(request["id"], "reject", colour="red")
        refused = person.decide(request["id"], "reject", "see ticket", reasons=[])
    assert refused["reason"] == "Rejected by alice in the API: see ticket"
