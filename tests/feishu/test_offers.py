"""Beyond yes/no in Feishu over the real app: preset reasons, edit & approve, grants, extend."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from channels.feishu import render_card
from tests.conftest import Gate, GateFactory
from tests.feishu.conftest import feishu_settings, send_callback
from tests.feishu.test_callbacks import Waiter, click, state, submit_and_card
from tests.feishu.test_card import make_view, walk
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_feishu import FakeFeishu, check_card
from tests.support.servers import wait_until


@pytest.fixture
def gate(make_gate: GateFactory, sqlite_url: str, fake_feishu: FakeFeishu) -> Gate:
    return make_gate(settings=feishu_settings(sqlite_url, fake_feishu, extra_rules=CHAT_RULES))


def answer_of(gate: Gate, payload: dict[str, Any]) -> dict[str, Any]:
    r = send_callback(gate, payload)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    if "card" in body:
        assert check_card(json.dumps(body["card"]["data"])) == []
    return body


# -- preset reject reasons ------------------------------------------------------------------


def test_preset_reasons_reach_the_waiter(gate: Gate, fake_feishu: FakeFeishu) -> None:
    request_id, message = submit_and_card(gate, fake_feishu, "refund_order", amount=900)
    (picker,) = [c for c in walk(message.card) if c["tag"] == "multi_select_static"]
    offered = {o["text"]["content"]: o["value"] for o in picker["options"]}
    assert set(offered) == {"wrong customer", "too expensive"}
    waiter = Waiter(gate, request_id)

    nothing = answer_of(gate, click(fake_feishu, message, "reject", "ou_bob"))
    assert nothing["toast"]["type"] == "error" and "reason" in nothing["toast"]["content"]
    assert state(gate, request_id)["status"] == "pending"

    form = {"reasons": [offered["wrong customer"], offered["too expensive"]]}
    payload = click(fake_feishu, message, "reject", "ou_bob", reason="see ticket 42", form=form)
    answer = answer_of(gate, payload)
    assert answer["toast"]["type"] == "success", answer
    waiter.join(20)
    assert waiter.result["status"] == "rejected"
    assert waiter.result["reason"].startswith(
        "Rejected by bob in Feishu: wrong customer; too expensive - see ticket 42"
    )


def test_a_preset_reason_alone_is_enough(gate: Gate, fake_feishu: FakeFeishu) -> None:
    request_id, message = submit_and_card(gate, fake_feishu, "refund_order", amount=900)
    answer = answer_of(
        gate, click(fake_feishu, message, "reject", "ou_bob", form={"reasons": ["r1"]})
    )
    assert answer["toast"]["type"] == "success"
    assert state(gate, request_id)["reason"].startswith("Rejected by bob in Feishu: too expensive")


# -- edit & approve -------------------------------------------------------------------------


def _edit_card(gate: Gate, fake: FakeFeishu, message: Any, open_id: str) -> dict[str, Any]:
    answer = answer_of(gate, click(fake, message, "edit", open_id))
    assert answer["toast"]["type"] == "info", answer
    card: dict[str, Any] = answer["card"]["data"]
    return card


def test_edit_and_approve_through_the_form(gate: Gate, fake_feishu: FakeFeishu) -> None:
    # a credential token masked in text (a value masked whole under a secret-named key
    # would make the card offer no approval at all: tests/web/test_reveal.py)
    args = {"amount": 900, "currency": "EUR", "memo": "password=hunter2", "customer": "c-1"}
    request_id, message = submit_and_card(gate, fake_feishu, "refund_order", **args)
    waiter = Waiter(gate, request_id)
    card = _edit_card(gate, fake_feishu, message, "ou_alice")
    inputs = {
        c["label"]["content"]: (c["name"], c["default_value"])
        for c in walk(card)
        if c["tag"] == "input" and "label" in c
    }
    # The rule's editable keys only, never a secret.
    assert inputs == {"amount": ("f0", "900"), "currency": ("f1", '"EUR"')}
    assert "hunter2" not in json.dumps(card)

    form = {"f0": "500", "f1": "USD"}
    payload = click(
        fake_feishu, message, "approve_edits", "ou_alice", reason="halved", form=form, card=card
    )
    answer = answer_of(gate, payload)
    assert answer["toast"]["type"] == "success", answer
    waiter.join(20)
    result = waiter.result
    assert result["status"] == "approved"
    assert result["approved_args"] == {**args, "amount": 500, "currency": "USD"}
    assert result["reason"].startswith("Approved with edits by alice in Feishu: halved")
    text = json.dumps(answer["card"]["data"], ensure_ascii=False)
    assert "Approved with edits by alice" in text and "amount 900 -> 500" in text


def test_invalid_edit_is_an_error_toast(gate: Gate, fake_feishu: FakeFeishu) -> None:
    request_id, message = submit_and_card(gate, fake_feishu, "refund_order", amount=900)
    card = _edit_card(gate, fake_feishu, message, "ou_alice")
    for bad in ("{oops", "nine hundred"):
        payload = click(
            fake_feishu, message, "approve_edits", "ou_alice", form={"f0": bad}, card=card
        )
        answer = answer_of(gate, payload)
        assert answer["toast"]["type"] == "error" and "amount:" in answer["toast"]["content"]
        assert "card" not in answer  # the form keeps what was typed
    assert state(gate, request_id)["status"] == "pending"


def test_the_edit_form_is_for_approvers_only(gate: Gate, fake_feishu: FakeFeishu) -> None:
    request_id, message = submit_and_card(gate, fake_feishu, "refund_order", amount=900)
    answer = answer_of(gate, click(fake_feishu, message, "edit", "ou_mallory"))
    assert answer["toast"]["type"] == "error" and "not an approver" in answer["toast"]["content"]
    forms = [c["name"] for c in walk(answer["card"]["data"]) if c["tag"] == "form"]
    assert forms == ["decision"]
    card = _edit_card(gate, fake_feishu, message, "ou_alice")
    back = answer_of(gate, click(fake_feishu, message, "view", "ou_alice", card=card))
    assert [c["name"] for c in walk(back["card"]["data"]) if c["tag"] == "form"] == ["decision"]
    assert state(gate, request_id)["status"] == "pending"


def test_no_edit_button_when_the_rule_forbids_edits(gate: Gate, fake_feishu: FakeFeishu) -> None:
    request_id, message = submit_and_card(gate, fake_feishu, "strict_transfer", amount=5)
    names = [c.get("name") for c in walk(message.card) if c["tag"] == "button"]
    assert "edit" not in names and "approve" in names
    # A crafted submission of edits is refused by the rule, not just hidden.
    card = render_card(make_view(id=request_id, tool_args={"amount": 5}), editing=True)
    payload = click(fake_feishu, message, "approve_edits", "ou_alice", form={"f0": "9"}, card=card)
    answer = answer_of(gate, payload)
    assert answer["toast"]["type"] == "error"
    assert state(gate, request_id)["status"] == "pending"


def test_edit_form_renders_injections_inert() -> None:
    evil = "<at id=all></at> [x](https://evil.example) \u202eevil ```"
    view = make_view(tool_args={"memo": evil, evil: 1})
    card = render_card(view, editing=True)
    assert check_card(json.dumps(card)) == []
    markdown = [c for c in walk(card) if c["tag"] == "markdown"]
    assert [m["element_id"] for m in markdown] == ["args"]
    inputs = [c for c in walk(card) if c["tag"] == "input" and "label" in c]
    assert {i["default_value"] for i in inputs} == {json.dumps(evil), "1"}
    assert all("\u202e" not in i["label"]["content"] for i in inputs)


# -- grants ---------------------------------------------------------------------------------


def test_grant_from_the_form_allows_later_calls(gate: Gate, fake_feishu: FakeFeishu) -> None:
    answer = gate.submit(
        tool_name="shell_run", tool_args={"cmd": "ls"}, session_id="s-9", agent_id="bot"
    )
    request_id = answer["request"]["id"]
    card = wait_until(
        lambda: next(
            (m for m in fake_feishu.posted() if request_id in json.dumps(m.cards[0])), None
        )
    )
    (select,) = [c for c in walk(card.card) if c["tag"] == "select_static"]
    labels = [o["text"]["content"] for o in select["options"]]
    assert labels == [
        "Approve + allow this tool in this session for 30 min",
        "Approve + allow this tool in this session for 1 h",
        "Approve + allow this tool for this agent for 30 min",
        "Approve + allow this tool for this agent for 1 h",
    ]
    payload = click(fake_feishu, card, "approve", "ou_alice", form={"grant": "session:1800s"})
    assert answer_of(gate, payload)["toast"]["type"] == "success"
    assert state(gate, request_id)["status"] == "approved"
    later = gate.submit(tool_name="shell_run", tool_args={"cmd": "rm -r x"}, session_id="s-9")
    assert later["decision"] == "allow" and later["request"]["decided_via"] == "grant"

    # A grant longer than the rule allows is refused with a toast, and nothing changes.
    again = gate.submit(tool_name="shell_run", tool_args={"cmd": "ls"}, session_id="s-10")
    card = wait_until(
        lambda: next(
            (m for m in fake_feishu.posted() if again["request"]["id"] in json.dumps(m.cards[0])),
            None,
        )
    )
    payload = click(fake_feishu, card, "approve", "ou_alice", form={"grant": "session:2h"})
    refused = answer_of(gate, payload)
    assert refused["toast"]["type"] == "error" and "longer" in refused["toast"]["content"]
    assert state(gate, again["request"]["id"])["status"] == "pending"


# -- extend ---------------------------------------------------------------------------------


def test_extend_moves_the_deadline_and_refuses_others(gate: Gate, fake_feishu: FakeFeishu) -> None:
    request_id, message = submit_and_card(gate, fake_feishu, "refund_order", amount=900)
    assert "expires in 10 min" in json.dumps(message.card)
    before = datetime.fromisoformat(state(gate, request_id)["expires_at"])

    refused = answer_of(gate, click(fake_feishu, message, "extend", "ou_mallory"))
    assert refused["toast"]["type"] == "error" and "not an approver" in refused["toast"]["content"]
    assert datetime.fromisoformat(state(gate, request_id)["expires_at"]) == before

    moved = answer_of(gate, click(fake_feishu, message, "extend", "ou_bob"))
    assert moved["toast"]["type"] == "success" and "Deadline moved" in moved["toast"]["content"]
    after = datetime.fromisoformat(state(gate, request_id)["expires_at"])
    assert (after - before).total_seconds() == 15 * 60
    assert "expires in 25 min" in json.dumps(moved["card"]["data"])
