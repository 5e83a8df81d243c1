"""The Teams card as a pure function of a request's view, validated against the Adaptive Card
1.5 schema: the base card, the approver view, hostile text, secrets, size."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from channels.teams.card import CARD_BYTES, MAX_USER_IDS, render_card
from gate.decisions.readmodel import RequestView, VoteView
from gate.policy.offers import Offers
from tests.support import views
from tests.support.fake_teams import check_card
from tests.teams.conftest import verbs, walk

NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
HOSTILE = (
    "<at>everyone</at> [Approve](https://evil.example) <font color=red>x</font> "
    "\u202eevil\u202c zero\u200bwidth **bold** https://evil.example/raw"
)


def make_view(**overrides: Any) -> RequestView:
    """The shared view as a refund whose rule offers edits, grants and reasons."""
    fields: dict[str, Any] = {
        "tool_name": "refund_order",
        "tool_args": {"amount": 900, "currency": "EUR", "customer": "c-1"},
        "rule": "refunds",
        "summary": "Refund order 42",
        "created_at": NOW,
        "offers": Offers(
            editable=("amount", "currency"),
            grant_scopes=("session", "agent"),
            reject_reasons=("wrong customer", "too expensive"),
        ),
    }
    return views.make_view(**{**fields, **overrides})


def runs(card: dict[str, Any]) -> str:
    return " ".join(el["text"] for el in walk(card) if el.get("type") == "TextRun")


def test_the_schema_check_is_real() -> None:
    # The validator refuses what Teams would: unknown properties, wrong types, no version.
    good = render_card(make_view(), now=NOW)
    assert check_card(good) == []
    assert check_card({**good, "colour": "red"})
    bad_action = json.loads(json.dumps(good))
    bad_action["actions"][0]["verb"] = 42
    assert check_card(bad_action)
    assert check_card({k: v for k, v in good.items() if k != "version"})


@pytest.mark.parametrize("status", ["pending", "approved", "rejected", "expired", "cancelled"])
@pytest.mark.parametrize("actionable", [False, True])
def test_every_state_and_view_validates(status: str, actionable: bool) -> None:
    view = make_view(status=status, decided_by="bob", decided_via="teams", reason="late")
    card = render_card(
        view, user_ids=["29:1a", "29:1b"], actionable=actionable, notice="Hi", now=NOW
    )
    assert check_card(card) == [], check_card(card)
    assert card["version"] == "1.5"
    if status == "pending":
        assert card["refresh"]["userIds"] == ["29:1a", "29:1b"]
        assert card["refresh"]["action"]["verb"] == "refresh"
    else:
        assert "refresh" not in card  # the outcome is the same for everyone
    offered = verbs(card) - {"refresh"}
    if status == "pending" and actionable:
        assert offered == {"approve", "reject", "approve_edits", "extend", "acknowledge"}
    else:
        assert offered == set()
    # gate's page is one click away on every view
    assert card["actions"][-1] == {
        "type": "Action.OpenUrl",
        "title": "Open in gate",
        "url": view.url,
    }


def test_the_base_card_shows_the_question_read_only() -> None:
    card = render_card(make_view(), user_ids=["29:1alice"], now=NOW)
    text = runs(card)
    for shown in ("refund_order", "Refund order 42", "billing-agent", "dave", "refunds"):
        assert shown in text
    assert "2026-11-21 10:10 UTC, expires in 10 min (then reject)" in text
    assert "amount: 900" in text
    monospace = [el for el in walk(card) if el.get("fontType") == "Monospace"]
    assert len(monospace) == 1 and "currency: EUR" in monospace[0]["text"]
    assert not [el for el in walk(card) if str(el.get("type", "")).startswith("Input.")]


def test_the_approver_view_offers_what_the_rule_offers() -> None:
    card = render_card(make_view(), actionable=True, now=NOW)
    executes = {el["verb"]: el for el in walk(card) if el.get("type") == "Action.Execute"}
    assert all(a["data"]["request_id"] == "01JD0000000000000000000000" for a in executes.values())
    assert executes["extend"]["data"]["extend_from"] == (NOW + timedelta(minutes=10)).isoformat()
    inputs = {el["id"]: el for el in walk(card) if str(el.get("type", "")).startswith("Input.")}
    assert [c["value"] for c in inputs["reasons"]["choices"]] == ["r0", "r1"]
    assert inputs["reason"]["isRequired"] is False  # a preset is reason enough
    assert [c["value"] for c in inputs["grant"]["choices"]] == [
        "session:1800s", "session:3600s", "agent:1800s", "agent:3600s",
    ]  # fmt: skip
    assert (inputs["f0"]["label"], inputs["f0"]["value"]) == ("amount", "900")
    assert (inputs["f1"]["label"], inputs["f1"]["value"]) == ("currency", '"EUR"')
    # The reason box is required when the rule has no presets: Teams checks before sending.
    plain = render_card(make_view(offers=Offers()), actionable=True, now=NOW)
    box = next(el for el in walk(plain) if el.get("id") == "reason")
    assert box["isRequired"] is True and box["errorMessage"]
    assert "grant" not in {el.get("id") for el in walk(plain)}


def test_no_edits_for_a_quorum_or_a_rule_that_forbids_them() -> None:
    for view in (
        make_view(approvals_required=2),
        make_view(offers=Offers(allow_edits=False)),
    ):
        assert "approve_edits" not in verbs(render_card(view, actionable=True, now=NOW))


def test_refresh_names_at_most_sixty_users() -> None:
    ids = [f"29:1user{i}" for i in range(75)]
    card = render_card(make_view(), user_ids=ids, now=NOW)
    assert card["refresh"]["userIds"] == ids[:MAX_USER_IDS]
    assert check_card(card) == []


def test_hostile_text_only_in_text_runs_and_defused() -> None:
    args = {"memo": HOSTILE, HOSTILE[:30]: [HOSTILE], "amount": 5}
    view = make_view(
        tool_name=HOSTILE[:50], tool_args=args, summary=HOSTILE, agent_id=HOSTILE, user_id=HOSTILE,
        offers=Offers(reject_reasons=(HOSTILE,)),
        votes=[VoteView(approver=HOSTILE, verdict="reject", via="teams", comment=HOSTILE, at=NOW)],
    )  # fmt: skip
    card = render_card(view, actionable=True, notice=HOSTILE, now=NOW)
    assert check_card(card) == []
    text = json.dumps(card, ensure_ascii=False)
    assert "evil.example" in text  # shown as text, not dropped
    for el in walk(card):
        if el.get("type") == "TextBlock":  # the only element that reads markdown
            assert "evil" not in el["text"] and "<" not in el["text"], el
        if el.get("type") == "Action.OpenUrl":
            assert el["url"] == view.url
        if el.get("type") == "TextRun":
            assert "selectAction" not in el
    # An edit box holds the value as typed (inert in an input), invisible characters escaped.
    values = [
        el.pop("value") for el in walk(card) if el.get("type") == "Input.Text" and "value" in el
    ]
    assert values and not [v for v in values if "\u202e" in v or "\u200b" in v]
    shown = json.dumps(card, ensure_ascii=False)
    for marker in ("<at>", "<font", "\u202e", "\u200b"):
        assert marker not in shown
    assert "‹at>everyone" in runs(card)
    # Labels and choice titles are plain, but some hosts read markdown links there.
    labels = [el.get("label", "") for el in walk(card)] + [el.get("title", "") for el in walk(card)]
    assert not [t for t in labels if "](" in t and "[" in t]
    assert "msteams" not in card


def test_secrets_are_masked_everywhere() -> None:
    view = make_view(
        tool_args={
            "password": "hunter2-teams",
            "note": "use sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123",
        },
        summary="token xoxb-1234567890-0987654321-AbCdEfGhIjKl",
        offers=Offers(),
    )
    text = json.dumps(render_card(view, actionable=True, now=NOW))
    for secret in ("hunter2-teams", "sk-ant-api03-abcdefghij", "xoxb-1234567890"):
        assert secret not in text
    assert "[masked]" in text


def test_huge_arguments_are_cut_to_fit_with_a_note() -> None:
    view = make_view(tool_args={f"k{i}": "x" * 400 for i in range(200)})
    card = render_card(view, actionable=True, now=NOW)
    size = len(json.dumps(card, ensure_ascii=False).encode())
    assert size <= CARD_BYTES
    assert check_card(card) == []
    assert any(el.get("id") == "args_cut" for el in walk(card))


def test_a_quorum_shows_the_votes_and_an_edited_approval_says_so() -> None:
    vote = VoteView(approver="alice", verdict="approve", via="teams", comment="ok", at=NOW)
    text = runs(render_card(make_view(approvals_required=2, votes=[vote]), now=NOW))
    assert "alice approved via teams: ok" in text
    edited = make_view(
        status="approved", decided_by="alice", decided_via="teams",
        approved_args={"amount": 500, "currency": "EUR", "customer": "c-1"},
    )  # fmt: skip
    assert "Approved with edits by alice" in runs(render_card(edited, now=NOW))
