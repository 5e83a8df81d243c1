"""The Python SDK against a live gate: GateClient (sync and async), PreToolUseHook,
@require_approval."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from gate.client import (
    ApprovalDenied,
    GateAPIError,
    GateClient,
    HookContext,
    HookResult,
    PreToolUseHook,
    require_approval,
)
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.servers import free_port, wait_until


class Decider:
    """Decides the next pending request for a tool from another thread, as a person would."""

    def __init__(self, gate: Gate, tool: str, token: str, verdict: str, comment: str | None = None):
        self.gate, self.tool = gate, tool
        self.args = (token, verdict, comment)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.request: dict[str, Any] = {}
        self.thread.start()

    def _pending(self) -> dict[str, Any] | None:
        with self.gate.client(cfg.ADMIN) as c:
            items = c.get(
                "/v1/requests", params={"status": "pending", "tool_name": self.tool}
            ).json()["items"]
        return items[0] if items else None

    def _run(self) -> None:
        self.request = wait_until(self._pending, 20)
        r = self.gate.decide(self.request["id"], *self.args)
        assert r.status_code == 200, r.text

    def join(self) -> dict[str, Any]:
        self.thread.join(20)
        return self.request


@pytest.fixture
def client(gate_sqlite: Gate) -> Iterator[GateClient]:
    c = GateClient(gate_sqlite.url, cfg.AGENT, agent_id="billing", timeout=20)
    yield c
    c.close()


def test_check_waits_for_the_person(gate_sqlite: Gate, client: GateClient) -> None:
    person = Decider(gate_sqlite, "pay_vendor", cfg.ALICE, "approve", "ok")

    verdict = client.check("pay_vendor", {"amount": 70000}, session_id="s1")

    request = person.join()
    assert verdict.allowed
    assert verdict.kind == "approved"
    assert verdict.reason == "gate: Approved by alice in the API: ok."
    assert verdict.rule == "big-payments"
    assert verdict.request_id == request["id"]
    assert request["agent_id"] == "billing"
    assert request["summary"] == 'pay_vendor {"amount": 70000}'


def test_policy_answers_without_a_person(client: GateClient) -> None:
    assert client.check("read_file", {}).kind == "allowed"
    denied = client.check("db_write", {"env": "prod"})
    assert (denied.allowed, denied.kind, denied.rule) == (False, "denied", "deny-prod-writes")
    none = client.check("unlisted", {})
    assert (none.allowed, none.kind) == (False, "no_rule")


def test_the_request_ends_with_the_clients_deadline(gate_sqlite: Gate, client: GateClient) -> None:
    # Long enough for the submit to land on a loaded machine, short enough to pass unanswered.
    verdict = client.check("ask_anything", {"x": 1}, timeout=3)

    assert (verdict.kind, verdict.allowed) == ("expired", False)
    assert verdict.request is not None
    with gate_sqlite.client(cfg.ADMIN) as c:
        request = c.get(f"/v1/requests/{verdict.request_id}").json()
    lived = datetime.fromisoformat(request["expires_at"]) - datetime.fromisoformat(
        request["created_at"]
    )
    assert request["status"] == "expired"
    assert lived <= timedelta(seconds=1.5)  # the client's 3 s less its margin, not the rule's


def test_unreachable_gate_is_a_verdict_not_an_exception() -> None:
    with GateClient(f"http://127.0.0.1:{free_port()}", cfg.AGENT) as c:
        verdict = c.check("pay_vendor", {"amount": 1})
        assert verdict.kind == "unreachable"
        assert "could not be reached (connection refused)" in verdict.reason
        with pytest.raises(GateAPIError) as err:
            c.submit("pay_vendor")
        assert err.value.code == "unreachable"


def test_raw_api_errors_are_typed(gate_sqlite: Gate) -> None:
    with GateClient(gate_sqlite.url, "wrong-token") as c:
        with pytest.raises(GateAPIError) as err:
            c.submit("pay_vendor", {"amount": 1})
    assert (err.value.status, err.value.code) == (401, "invalid_token")
    with GateClient(gate_sqlite.url, cfg.AGENT) as c:
        verdict = c.check("read_x", {})
        assert verdict.kind == "allowed"
        with pytest.raises(TypeError):
            c.check("read_x", {}, colour="red")


async def test_async_check_and_raw_calls(gate_sqlite: Gate) -> None:
    async with GateClient(gate_sqlite.url, cfg.AGENT, timeout=20) as c:
        person = Decider(gate_sqlite, "wire_funds", cfg.ALICE, "reject", "wrong account")
        verdict = await c.check_async("wire_funds", {"to": "x"})
        person.join()
        assert (verdict.allowed, verdict.kind) == (False, "rejected")
        assert verdict.reason.startswith("gate: Rejected by alice in the API: wrong account.")

        answer = await c.submit_async("ask_async", {"n": 1}, idempotency_key="k-async")
        request_id = answer["request"]["id"]
        still = await c.wait_async(request_id, timeout=0.1)
        assert still["status"] == "pending"
        cancelled = await c.cancel_async(request_id, "changed my mind")
        assert cancelled["reason"] == "Cancelled by billing-agent: changed my mind"
        assert (await c.get_async(request_id))["status"] == "cancelled"


# -- PreToolUseHook -----------------------------------------------------------------------------


def test_pre_tool_use_hook(gate_sqlite: Gate, client: GateClient) -> None:
    hook = PreToolUseHook(client)
    person = Decider(gate_sqlite, "deploy_api", cfg.CAROL, "approve")

    approved = hook(HookContext("deploy_api", {"env": "prod"}, metadata={"tool_call_id": "c1"}))

    request = person.join()
    assert approved == HookResult(
        allow=True,
        side_effects=[
            f"gate: approved (request {request['id']}): gate: Approved by carol in the API."
        ],
    )
    denied = hook(HookContext("db_drop", {"env": "prod"}))
    assert not denied.allow
    assert denied.error is not None and "No writes to prod from agents" in denied.error
    assert hook(HookContext("unlisted")).allow
    assert not PreToolUseHook(client, on_no_rule="deny")(HookContext("unlisted")).allow


async def test_pre_tool_use_hook_async(gate_sqlite: Gate) -> None:
    async with GateClient(gate_sqlite.url, cfg.AGENT, timeout=20) as c:
        hook = PreToolUseHook(c)
        person = Decider(gate_sqlite, "ask_hook", cfg.BOB, "reject", "no")
        result = await hook.call_async(HookContext("ask_hook", {"q": 1}, user_id="dave"))
        request = person.join()
    assert not result.allow
    assert result.error is not None and result.error.startswith("gate: Rejected by bob")
    assert result.side_effects == [f"gate: rejected (request {request['id']})"]


def test_pre_tool_use_hook_fail_open_is_explicit() -> None:
    down = GateClient(f"http://127.0.0.1:{free_port()}", cfg.AGENT)
    assert not PreToolUseHook(down)(HookContext("pay_vendor")).allow
    assert PreToolUseHook(down, fail_open=True)(HookContext("pay_vendor")).allow


# -- @require_approval ----------------------------------------------------------------------------


def test_require_approval_sync(gate_sqlite: Gate, client: GateClient) -> None:
    ran: list[int] = []

    @require_approval(
        rule="refunds", client=client, summary=lambda order, amount: f"refund {amount}"
    )
    def refund(order: str, amount: int = 10) -> str:
        ran.append(amount)
        return f"refunded {order}"

    person = Decider(gate_sqlite, "refund", cfg.ALICE, "approve")
    assert refund("o-1", amount=25) == "refunded o-1"
    request = person.join()
    assert request["tool_args"] == {"order": "o-1", "amount": 25}
    assert request["summary"] == "refund 25"
    assert request["rule"] == "requires_confirmation"

    person = Decider(gate_sqlite, "refund", cfg.ALICE, "reject", "customer is lying")
    with pytest.raises(ApprovalDenied) as denied:
        refund("o-2")
    request = person.join()
    assert ran == [25]
    assert denied.value.kind == "rejected"
    assert denied.value.reason.startswith("gate: Rejected by alice in the API: customer is lying.")
    assert denied.value.request is not None and denied.value.request["id"] == request["id"]


async def test_require_approval_async(gate_sqlite: Gate) -> None:
    c = GateClient(gate_sqlite.url, cfg.AGENT, timeout=20)

    @require_approval(client=lambda: c, tool_name="pay_vendor")
    async def pay(amount: int) -> int:
        return amount

    person = Decider(gate_sqlite, "pay_vendor", cfg.BOB, "approve")
    assert await pay(60000) == 60000
    assert person.join()["rule"] == "big-payments"

    with pytest.raises(ApprovalDenied) as denied:
        await _denied_call(c)
    assert denied.value.kind == "denied"
    await c.aclose()


async def _denied_call(c: GateClient) -> None:
    @require_approval(client=c, tool_name="db_write")
    async def write(env: str) -> None:
        raise AssertionError("must not run")

    await write("prod")
