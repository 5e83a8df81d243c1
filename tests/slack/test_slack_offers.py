"""What a rule offers, in Slack over the real app: reasons, edit & approve, grants, extend."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

import pytest

from channels.slack.modals import EDIT_CALLBACK, REJECT_CALLBACK
from tests.conftest import Gate, GateFactory
from tests.slack.conftest import (
    _fixture,
    block_actions,
    card_for,
    card_text,
    has_buttons,
    interact,
    slack_settings,
)
from tests.slack.test_slack_flow import Waiter
from tests.support import config as cfg
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_slack import CHANNEL, FakeSlack, Message, check_modal
from tests.support.servers import wait_until


@pytest.fixture
def gate(make_gate: GateFactory, sqlite_url: str, fake_slack: FakeSlack) -> Gate:
    return make_gate(settings=slack_settings(sqlite_url, fake_slack, extra_rules=CHAT_RULES))


def _waiter(gate: Gate, request_id: str) -> Waiter:
    waiter = Waiter(gate, request_id)
    waiter.start()
    return waiter


def _submit(gate: Gate, tool: str, args: dict[str, Any], **extra: Any) -> str:
    answer = gate.submit(tool_name=tool, tool_args=args, user_id="dave", **extra)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def _request(gate: Gate, request_id: str) -> dict[str, Any]:
    with gate.client(cfg.ADMIN) as c:
        data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return data


def _actions(card: Message) -> list[dict[str, Any]]:
    block = next(b for b in card.blocks if b["type"] == "actions")
    elements: list[dict[str, Any]] = block["elements"]
    return elements


def _open(gate: Gate, fake: FakeSlack, card: Message, user: str, action_id: str) -> dict[str, Any]:
    """Click a button that opens a modal; return the modal Slack was asked to show."""
    before = len(fake.views)
    request_id = _actions(card)[0]["value"]
    trigger = f"trigger-{action_id}-{user}"
    payload = block_actions(request_id, user, action_id, message=card, trigger_id=trigger)
    r = interact(gate, payload)
    assert r.status_code == 200, r.text
    return _opened(fake, before)


def _opened(fake: FakeSlack, before: int) -> dict[str, Any]:
    wait_until(lambda: len(fake.views) > before)
    view = fake.views[-1]
    check_modal(view)
    return view


def _click(gate: Gate, card: Message, user: str, action_id: str, request_id: str) -> Any:
    payload = block_actions(request_id, user, action_id, message=card)
    return interact(gate, payload)


def _submission(view: dict[str, Any], user: str, values: dict[str, Any]) -> dict[str, Any]:
    """Submitting `view` with these state values, shaped like the captured real payload."""
    payload = copy.deepcopy(_fixture("slack_view_submission_modal.json"))
    payload["user"] = {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T0"}
    payload["view"].update(
        {
            "callback_id": view["callback_id"],
            "private_metadata": view["private_metadata"],
            "blocks": view["blocks"],
            "state": {"values": values},
        }
    )
    return payload


def _edit_values(view: dict[str, Any], **changed: str) -> dict[str, Any]:
    """The modal's state with each box at its initial value, except `changed` (by label)."""
    values: dict[str, Any] = {}
    for block in view["blocks"]:
        if block["type"] != "input" or not block.get("block_id", "").startswith("edit_"):
            continue
        label = block["label"]["text"]
        text = changed.get(label, block["element"]["initial_value"])
        values[block["block_id"]] = {"value": {"type": "plain_text_input", "value": text}}
    return values


# -- preset reject reasons ------------------------------------------------------------------


def test_preset_reasons_reach_the_waiter(gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(gate, "refund_order", {"amount": 900, "customer": "c-1"})
    card = card_for(fake_slack, request_id)
    waiter = _waiter(gate, request_id)
    modal = _open(gate, fake_slack, card, "U0BOB", "gate_reject")
    assert modal["callback_id"] == REJECT_CALLBACK
    reasons, reason = modal["blocks"]
    assert reasons["element"]["type"] == "checkboxes" and reason["optional"] is True
    offered = {o["text"]["text"]: o["value"] for o in reasons["element"]["options"]}
    assert set(offered) == {"wrong customer", "too expensive"}

    # Neither a ticked reason nor text: the modal says so and nothing changes.
    empty = {"reason": {"reason_input": {"type": "plain_text_input", "value": ""}}}
    r = interact(gate, _submission(modal, "U0BOB", empty))
    assert r.json()["response_action"] == "errors"
    assert _request(gate, request_id)["status"] == "pending"

    picked = {
        "type": "checkboxes",
        "selected_options": [
            {
                "text": {"type": "plain_text", "text": "wrong customer"},
                "value": offered["wrong customer"],
            }
        ],
    }
    values = {
        "reasons": {"reasons_input": picked},
        "reason": {"reason_input": {"type": "plain_text_input", "value": "see ticket 42"}},
    }
    r = interact(gate, _submission(modal, "U0BOB", values))
    assert r.status_code == 200 and r.content == b""
    waiter.join(20)
    assert waiter.result["status"] == "rejected"
    assert waiter.result["reason"].startswith(
        "Rejected by bob in Slack: wrong customer - see ticket 42"
    )
    card = wait_until(lambda: (c := card_for(fake_slack, request_id)).updates and c)
    assert "wrong customer" in card_text(card)


def test_a_forged_reason_value_is_refused(gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(gate, "refund_order", {"amount": 900})
    modal = _open(gate, fake_slack, card_for(fake_slack, request_id), "U0BOB", "gate_reject")
    forged = {"type": "checkboxes", "selected_options": [{"value": "r9"}]}
    r = interact(gate, _submission(modal, "U0BOB", {"reasons": {"reasons_input": forged}}))
    assert r.json()["response_action"] == "errors" and "reasons" in r.json()["errors"]
    assert _request(gate, request_id)["status"] == "pending"


# -- edit & approve -------------------------------------------------------------------------


def test_edit_and_approve_through_the_modal(gate: Gate, fake_slack: FakeSlack) -> None:
    # a credential token masked in text (a value masked whole under a secret-named key
    # would make the card offer no approval at all: tests/web/test_reveal.py)
    args = {"amount": 900, "currency": "EUR", "memo": "key sk-" + "x" * 30, "customer": "c-1"}
    request_id = _submit(gate, "refund_order", args)
    card = card_for(fake_slack, request_id)
    assert "gate_edit" in [e["action_id"] for e in _actions(card)]
    waiter = _waiter(gate, request_id)
    modal = _open(gate, fake_slack, card, "U0ALICE", "gate_edit")
    assert modal["callback_id"] == EDIT_CALLBACK
    inputs = {
        b["label"]["text"]: b["element"]["initial_value"]
        for b in modal["blocks"]
        if b.get("block_id", "").startswith("edit_")
    }
    # Only the rule's editable keys, and never a secret (it keeps its value unseen).
    assert inputs == {"amount": "900", "currency": '"EUR"'}
    assert "sk-" not in str(modal)

    values = _edit_values(modal, amount="500", currency="USD")
    r = interact(gate, _submission(modal, "U0ALICE", values))
    assert r.status_code == 200 and r.content == b"", r.text
    waiter.join(20)
    result = waiter.result
    assert result["status"] == "approved"
    assert result["approved_args"] == {**args, "amount": 500, "currency": "USD"}
    assert "Approved with edits by alice in Slack" in result["reason"]
    card = wait_until(lambda: (c := card_for(fake_slack, request_id)).updates and c)
    text = card_text(card)
    assert "Approved with edits by alice" in text and "`900` → `500`" in text
    assert not has_buttons(card)


def test_invalid_json_edit_is_a_field_error(gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(gate, "refund_order", {"amount": 900, "currency": "EUR"})
    modal = _open(gate, fake_slack, card_for(fake_slack, request_id), "U0ALICE", "gate_edit")
    for bad in ("[500", "five hundred"):  # broken JSON; text where a number was
        r = interact(gate, _submission(modal, "U0ALICE", _edit_values(modal, amount=bad)))
        body = r.json()
        assert body["response_action"] == "errors", body
        assert list(body["errors"]) == ["edit_0"]
    assert _request(gate, request_id)["status"] == "pending"


def test_no_edit_button_when_the_rule_forbids_edits(gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(gate, "strict_transfer", {"amount": 5})
    card = card_for(fake_slack, request_id)
    assert "gate_edit" not in [e["action_id"] for e in _actions(card)]
    # A crafted click on the missing button opens nothing and changes nothing.
    r = _click(gate, card, "U0ALICE", "gate_edit", request_id)
    assert r.status_code == 200
    wait_until(lambda: fake_slack.ephemerals)
    assert "Nothing here can be edited" in fake_slack.ephemerals[-1]["text"]
    assert fake_slack.views == []
    assert _request(gate, request_id)["status"] == "pending"


# -- grants ---------------------------------------------------------------------------------


def test_grant_from_the_select_allows_later_calls(gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(gate, "shell_run", {"cmd": "ls"}, session_id="sess-1")
    card = card_for(fake_slack, request_id)
    select = next(e for e in _actions(card) if e["type"] == "static_select")
    labels = [o["text"]["text"] for o in select["options"]]
    assert labels == [
        "Approve + allow this tool in this session for 30 min",
        "Approve + allow this tool in this session for 1 h",
    ]
    payload = block_actions(request_id, "U0ALICE", "gate_grant", message=card)
    payload["actions"][0] = {
        "type": "static_select",
        "action_id": "gate_grant",
        "block_id": "decide-x",
        "selected_option": select["options"][0],
        "action_ts": "1700000000.1",
    }
    assert interact(gate, payload).status_code == 200
    assert _request(gate, request_id)["status"] == "approved"
    later = gate.submit(tool_name="shell_run", tool_args={"cmd": "rm x"}, session_id="sess-1")
    assert later["decision"] == "allow", later
    assert later["request"]["decided_via"] == "grant"
    other = gate.submit(tool_name="shell_run", tool_args={"cmd": "ls"}, session_id="sess-2")
    assert other["decision"] == "ask"


# -- extend ---------------------------------------------------------------------------------


def test_extend_moves_the_deadline_and_refuses_others(gate: Gate, fake_slack: FakeSlack) -> None:
    request_id = _submit(gate, "refund_order", {"amount": 900})
    card = card_for(fake_slack, request_id)
    before = datetime.fromisoformat(_request(gate, request_id)["expires_at"])
    assert "expires in 10 min" in card_text(card)

    assert _click(gate, card, "U0MALLORY", "gate_extend", request_id).status_code == 200
    wait_until(lambda: fake_slack.ephemerals)
    assert "not an approver" in fake_slack.ephemerals[-1]["text"]
    assert datetime.fromisoformat(_request(gate, request_id)["expires_at"]) == before

    assert _click(gate, card, "U0BOB", "gate_extend", request_id).status_code == 200
    wait_until(lambda: len(fake_slack.ephemerals) == 2)
    assert "Deadline moved to" in fake_slack.ephemerals[-1]["text"]
    after = datetime.fromisoformat(_request(gate, request_id)["expires_at"])
    assert (after - before).total_seconds() == 15 * 60
    refreshed = wait_until(lambda: (c := card_for(fake_slack, request_id)).updates and c)
    assert "expires in 25 min" in card_text(refreshed) and has_buttons(refreshed)
    assert CHANNEL == refreshed.channel
