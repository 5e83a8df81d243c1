"""A click on a Feishu card: read from the platform's shape, translated into gate's neutral
`Click` (edits by argument name, reasons as their text, a grant as (scope, duration)), and
the toast the clicker gets back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from channels.feishu import parse_action, to_click, toast_for
from channels.feishu.clicks import NEED_A_REASON, NOTHING_EDITABLE, CardAction
from gate.base.errors import BadRequest
from gate.base.statuses import RequestStatus, Verdict
from gate.decisions import outcomes
from gate.decisions.acting import Refusal, Result
from gate.decisions.clicks import Action, Click
from gate.policy.offers import Offers
from tests.feishu.test_card import NOW, fixture, make_view
from tests.support.fake_feishu import card_action_payload

# -- reading -----------------------------------------------------------------------------------


def our_action(**extra: Any) -> dict[str, Any]:
    return {
        "tag": "button",
        "value": {"request_id": "01JDREQ", "verdict": "reject"},
        "name": "reject",
        **extra,
    }


def test_parse_schema_2_click_with_reason() -> None:
    payload = card_action_payload(
        action=our_action(form_value={"reason": "  not this vendor\u202e  "}),
        open_id="ou_alice",
        verification_token="vt",
        event_id="ev1",
        message_id="om_1",
    )
    action = parse_action(payload)
    assert action.request_id == "01JDREQ"
    assert action.verdict == "reject"
    assert action.open_id == "ou_alice"
    assert action.comment == "not this vendor"
    assert action.event_id == "ev1"
    assert action.message_id == "om_1"
    assert not action.legacy


def test_parse_accepts_a_json_string_value() -> None:
    payload = card_action_payload(
        action={"tag": "button", "value": json.dumps({"request_id": "r", "verdict": "approve"})},
        open_id="ou_bob",
        verification_token="vt",
    )
    action = parse_action(payload)
    assert (action.request_id, action.verdict, action.comment) == ("r", "approve", None)


def test_parse_legacy_flat_shape() -> None:
    legacy = fixture("feishu_card_callback_legacy.json")
    with pytest.raises(BadRequest):
        parse_action(legacy)  # someone else's approval card: not our value
    legacy["action"]["value"] = {"request_id": "01JDREQ", "verdict": "approve"}
    action = parse_action(legacy)
    assert action.legacy
    assert action.open_id == "ou_cdaf8ff9dcf6723db8f09f10b4b53c0f"
    assert action.message_id == "om_697921c87902fa9999cf9b8520ea5eb2"


def test_docs_fixture_parses_shape_but_refuses_foreign_value() -> None:
    docs = fixture("feishu_card_action_trigger_v2_docs.json")
    with pytest.raises(BadRequest, match="not ours"):
        parse_action(docs)
    docs["event"]["action"]["value"] = {"request_id": "x", "verdict": "approve"}
    assert parse_action(docs).open_id.startswith("ou_3c14")


@pytest.mark.parametrize(
    "payload",
    [
        {"schema": "2.0", "header": {}, "event": "nope"},
        {"schema": "2.0", "event": {"operator": {"open_id": "ou_a"}}},
        {"schema": "2.0", "event": {"action": {"value": {"request_id": "r", "verdict": "maybe"}}}},
        {
            "schema": "2.0",
            "event": {"action": {"value": {"request_id": "r", "verdict": "approve"}}},
        },
        {"schema": "2.0", "event": {"action": {"value": "{not json"}}},
    ],
)
def test_parse_rejects_malformed_clicks(payload: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        parse_action(payload)


# -- translating ------------------------------------------------------------------------------

OFFERS = Offers(
    reject_reasons=("vendor not approved", "amount too large"), grant_scopes=("session",)
)


def press(verdict: str, form: dict[str, Any] | None = None) -> CardAction:
    """A verified click on `verdict`, read from the platform's shape like any other."""
    action: dict[str, Any] = {"tag": "button", "value": {"request_id": "r1", "verdict": verdict}}
    if form is not None:
        action["form_value"] = form
    payload = card_action_payload(action=action, open_id="ou_alice", verification_token="vt")
    return parse_action(payload)


def test_reject_carries_the_picked_reasons_as_their_text() -> None:
    form = {"reasons": ["r1", "r0", "r1"], "reason": "call finance first"}
    click = to_click("feishu", press("reject", form), make_view(offers=OFFERS))
    assert click == Click(
        "feishu", "ou_alice", "r1", "reject", "call finance first",
        reasons=("amount too large", "vendor not approved"),
    )  # fmt: skip


@pytest.mark.parametrize("picked", [["r2"], ["r-1"], ["x0"], ["r\u00b2"], ["r"]])
def test_a_reason_the_card_did_not_offer_is_not_recorded(picked: list[str]) -> None:
    said = to_click("feishu", press("reject", {"reasons": picked}), make_view(offers=OFFERS))
    assert isinstance(said, str) and said.startswith("Not recorded: not one of this rule's")


@pytest.mark.parametrize("form", [None, {}, {"reason": "   "}, {"reasons": []}])
def test_reject_needs_a_reason_or_a_preset(form: dict[str, Any] | None) -> None:
    assert to_click("feishu", press("reject", form), make_view(offers=OFFERS)) == NEED_A_REASON


def test_edits_reach_gate_by_argument_name_parsed_like_the_original() -> None:
    # The edit form names its boxes f0, f1... in the order it offered the arguments.
    view = make_view(tool_args={"amount": 60000, "vendor": "ACME", "memo": "q3"})
    form = {"f0": "500", "f2": "Q4 invoice", "f7": "no such box", "reason": "smaller"}
    click = to_click("feishu", press("approve_edits", form), view)
    assert click == Click(
        "feishu",
        "ou_alice",
        "r1",
        "approve",
        "smaller",
        edits={"amount": 500, "memo": "Q4 invoice"},
    )


def test_an_edit_that_does_not_parse_names_the_argument() -> None:
    view = make_view(tool_args={"amount": 60000, "<at id=all>": "x"})
    said = to_click("feishu", press("approve_edits", {"f0": "lots"}), view)
    assert said == "Not recorded: amount: expected a number, like the original value"
    said = to_click("feishu", press("approve_edits", {"f1": "[1,"}), view)
    assert isinstance(said, str) and "<at" not in said and "not valid JSON" in said


@pytest.mark.parametrize(
    "view",
    [
        make_view(offers=Offers(allow_edits=False)),
        make_view(approvals_required=2),
        make_view(tool_args={"password": "hunter2"}),  # a secret is never offered for editing
    ],
)
def test_approve_with_edits_where_the_card_offered_none(view: Any) -> None:
    assert to_click("feishu", press("approve_edits", {"f0": "1"}), view) == NOTHING_EDITABLE


def test_a_grant_reaches_gate_as_scope_and_duration() -> None:
    click = to_click("feishu", press("approve", {"grant": "session:1800s"}), None)
    assert click == Click("feishu", "ou_alice", "r1", "approve", grant=("session", "1800s"))
    assert to_click("feishu", press("approve"), None) == Click(
        "feishu", "ou_alice", "r1", "approve"
    )
    said = to_click("feishu", press("approve", {"grant": "forever"}), None)
    assert said == "Not recorded: not a grant choice: 'forever'."


@pytest.mark.parametrize("view", [None, make_view(status="approved", decided_by="bob")])
@pytest.mark.parametrize("verdict", ["reject", "approve_edits"])
def test_a_missing_or_finished_request_passes_through_for_gate_to_answer(
    view: Any, verdict: str
) -> None:
    # No reason asked for, no form read: gate says "no longer exists" / "already approved".
    click = to_click("feishu", press(verdict, {"f0": "1"}), view)
    expected: Action = "reject" if verdict == "reject" else "approve"
    assert click == Click("feishu", "ou_alice", "r1", expected)


# -- answering --------------------------------------------------------------------------------


def test_toast_types() -> None:
    view = make_view(status="approved", decided_by="alice", decided_via="feishu")
    changed = Result(outcomes.Changed(view.id, RequestStatus.approved), view)
    assert toast_for(changed) == {"type": "success", "content": "Approved by alice in Feishu."}
    refused = Result(None, view, Refusal.not_an_approver)
    assert toast_for(refused)["type"] == "error"
    final = Result(
        outcomes.AlreadyFinal(view.id, RequestStatus.approved, "alice", NOW, "feishu"), view
    )
    assert toast_for(final) == {
        "type": "info",
        "content": "Already approved by alice at 2026-11-21 10:00:00 UTC.",
    }
    voted = Result(outcomes.AlreadyVoted(view.id, "alice", Verdict.approve), view)
    assert toast_for(voted)["type"] == "info"
