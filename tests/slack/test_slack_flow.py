"""The Slack channel end to end: real app, real slack-sdk client, fake Slack, signed clicks."""

from __future__ import annotations

import threading
from typing import Any

from tests.conftest import Gate
from tests.slack.conftest import (
    block_actions,
    card_for,
    card_text,
    has_buttons,
    interact,
    view_submission,
)
from tests.support import config as cfg
from tests.support.fake_slack import CHANNEL, FakeSlack
from tests.support.servers import wait_until


def _submit(gate: Gate, tool: str = "pay_vendor", **extra: Any) -> str:
    answer = gate.submit(
        tool_name=tool,
        tool_args={"amount": 60000, "vendor": "acme"},
        user_id="dave",
        agent_id="billing-agent",
        summary="Pay acme 60k",
        **extra,
    )
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


class Waiter(threading.Thread):
    """An agent long-polling /wait in the background."""

    def __init__(self, gate: Gate, request_id: str) -> None:
        super().__init__(daemon=True)
        self.gate, self.request_id = gate, request_id
        self.result: dict[str, Any] = {}

    def run(self) -> None:
        with self.gate.client(cfg.AGENT) as c:
            r = c.get(f"/v1/requests/{self.request_id}/wait", params={"timeout": 20})
        self.result = r.json()


def _status(gate: Gate, request_id: str) -> dict[str, Any]:
    with gate.client(cfg.ADMIN) as c:
        data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return data


def test_submit_posts_a_card(slack_gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(slack_gate)
    card = card_for(fake_slack, request_id)
    assert card.channel == CHANNEL
    text = card_text(card)
    assert "pay_vendor" in text and "Pay acme 60k" in text and "big-payments" in text
    assert "billing-agent" in text and "dave" in text and "60000" in text
    buttons = next(b for b in card.blocks if b["type"] == "actions")["elements"]
    assert [b["action_id"] for b in buttons] == [
        "gate_approve",
        "gate_edit",
        "gate_reject",
        "gate_extend",
        "gate_acknowledge",
    ]
    # every button names the request; Extend also the deadline the card showed
    assert {b["value"].split("|")[0] for b in buttons} == {request_id}
    assert buttons[3]["value"].count("|") == 1
    assert buttons[0]["style"] == "primary" and "confirm" in buttons[0]
    assert buttons[2]["style"] == "danger"
    post = fake_slack.calls_to("chat.postMessage", ok=True)[0]
    assert post.body["unfurl_links"] is False and post.body["text"]
    view = wait_until(
        lambda: (
            (v := slack_gate.state.service.view(request_id, full=True))
            and any(d.channel == "slack" and d.status == "sent" for d in v.deliveries)
            and v
        )
    )
    slack_rows = [d for d in view.deliveries if d.channel == "slack"]
    assert [d.message_ref for d in slack_rows] == [f"{CHANNEL}:{card.ts}"]


def test_signed_click_approves_and_the_waiter_returns(
    slack_gate: Gate, fake_slack: FakeSlack
) -> None:
    request_id = _submit(slack_gate)
    card = card_for(fake_slack, request_id)
    waiter = Waiter(slack_gate, request_id)
    waiter.start()
    r = interact(slack_gate, block_actions(request_id, "U0ALICE", message=card))
    assert r.status_code == 200, r.text
    waiter.join(15)
    assert waiter.result["status"] == "approved"
    assert waiter.result["decided_by"] == "alice"
    assert waiter.result["decided_via"] == "slack"
    wait_until(lambda: card.updates >= 1 and not has_buttons(card))
    assert "Approved by alice in Slack" in card_text(card)
    assert fake_slack.ephemerals == []


def test_reject_through_the_modal_tells_the_agent_why(
    slack_gate: Gate, fake_slack: FakeSlack
) -> None:
    request_id = _submit(slack_gate)
    card = card_for(fake_slack, request_id)
    waiter = Waiter(slack_gate, request_id)
    waiter.start()
    r = interact(slack_gate, block_actions(request_id, "U0BOB", "gate_reject", message=card))
    assert r.status_code == 200, r.text
    [opened] = fake_slack.calls_to("views.open", ok=True)
    assert opened.body["trigger_id"] == "1234.5678.abcdef"
    # opening the modal decides nothing
    assert _status(slack_gate, request_id)["status"] == "pending"
    modal = opened.body["view"]
    r = interact(slack_gate, view_submission(modal, "U0BOB", "Split it into two payments"))
    assert r.status_code == 200, r.text
    waiter.join(15)
    assert waiter.result["status"] == "rejected"
    assert waiter.result["reason"] == "Rejected by bob in Slack: Split it into two payments"
    wait_until(lambda: not has_buttons(card))
    assert "Split it into two payments" in card_text(card)


def test_quorum_card_shows_who_approved_so_far(slack_gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(slack_gate, tool="wire_funds")
    card = card_for(fake_slack, request_id)
    assert "0 of 2 approvals" in card_text(card)
    r = interact(slack_gate, block_actions(request_id, "U0ALICE", message=card))
    assert r.status_code == 200, r.text
    wait_until(lambda: "1 of 2 approvals (alice)" in card_text(card))
    assert has_buttons(card)
    assert _status(slack_gate, request_id)["status"] == "pending"
    wait_until(lambda: fake_slack.ephemerals)
    assert fake_slack.ephemerals[0]["user"] == "U0ALICE"
    assert "Your approval is recorded (1 of 2)" in fake_slack.ephemerals[0]["text"]
    r = interact(slack_gate, block_actions(request_id, "U0BOB", message=card))
    assert r.status_code == 200, r.text
    wait_until(lambda: not has_buttons(card))
    assert _status(slack_gate, request_id)["status"] == "approved"
    assert "2 of 2 approvals (alice, bob)" in card_text(card)


def test_cancel_and_expiry_update_the_card(slack_gate: Gate, fake_slack: FakeSlack) -> None:
    cancelled = _submit(slack_gate)
    expiring = slack_gate.submit(tool_name="ephemeral_probe", tool_args={})["request"]["id"]
    cancelled_card = card_for(fake_slack, cancelled)
    expiring_card = card_for(fake_slack, expiring)
    with slack_gate.client(cfg.AGENT) as c:
        r = c.post(f"/v1/requests/{cancelled}/cancel", json={"reason": "user gave up"})
    assert r.status_code == 200, r.text
    wait_until(lambda: not has_buttons(cancelled_card))
    assert "Cancelled by billing-agent" in card_text(cancelled_card)
    wait_until(lambda: not has_buttons(expiring_card))
    assert "Expired: nobody answered before the deadline" in card_text(expiring_card)
    # a late click on the expired card is answered, not counted
    r = interact(slack_gate, block_actions(expiring, "U0ALICE", message=expiring_card))
    assert r.status_code == 200
    wait_until(lambda: fake_slack.ephemerals)
    assert fake_slack.ephemerals[0]["text"].startswith("Already expired")


def test_submitting_the_reason_twice_rejects_once(slack_gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(slack_gate)
    card = card_for(fake_slack, request_id)
    interact(slack_gate, block_actions(request_id, "U0BOB", "gate_reject", message=card))
    [opened] = fake_slack.calls_to("views.open", ok=True)
    submission = view_submission(opened.body["view"], "U0BOB", "no")
    assert interact(slack_gate, submission).status_code == 200
    retry = {"X-Slack-Retry-Num": "1"}
    r = interact(slack_gate, submission, headers=retry)
    assert r.status_code == 200 and r.content == b""  # the modal just closes
    # alice rejecting afterwards is told it is already decided, inside the modal
    r = interact(slack_gate, view_submission(opened.body["view"], "U0ALICE", "also no"))
    assert r.json()["response_action"] == "errors"
    assert r.json()["errors"]["reason"].startswith("Already rejected by bob at ")
    # an empty reason is refused in the modal, before anything is decided
    r = interact(slack_gate, view_submission(opened.body["view"], "U0ALICE", "   "))
    assert r.json()["errors"]["reason"].startswith("Say why")
    assert [v["approver"] for v in _status(slack_gate, request_id)["votes"]] == ["bob"]
