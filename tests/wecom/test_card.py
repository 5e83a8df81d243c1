"""WeCom template cards as pure functions of a request's view: state, facts, offers, limits,
hostile text (the fake's strict check is the documented lengths)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from channels.wecom import card
from gate.decisions.readmodel import RequestView
from gate.policy.offers import Offers
from gate.rendering import as_text, render_call
from tests.support import views
from tests.support.fake_wecom import check_card

NOW = datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)
URL = "https://gate.example/requests/01JD0000000000000000000000"
TASK = card.task_id("01JD0000000000000000000000", "alice|bob")
HOSTILE = (
    "<a href='https://evil.example'>Approve</a> $userName=boss$ <@all> [x](https://evil.example)"
    " \u202eevil\u202c zero\u200bwidth\n\x1b[31m xoxb-1234567890-0987654321-AbCdEfGhIjKl"
)


def make_view(**overrides: Any) -> RequestView:
    """The shared view, created at this file's NOW (with microseconds)."""
    return views.make_view(**{"created_at": NOW, **overrides})


def strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return []


def urls(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [str(v) for k, v in node.items() if k == "url"]
        return found + [u for v in node.values() for u in urls(v)]
    if isinstance(node, list):
        return [u for v in node for u in urls(v)]
    return []


def test_a_pending_card_shows_the_request_and_offers_the_decision() -> None:
    rendered = card.render_card(make_view(), TASK, now=NOW)
    assert check_card(rendered) == []
    assert rendered["card_type"] == "button_interaction" and rendered["task_id"] == TASK
    headline = render_call("pay_vendor", {"amount": 60000, "vendor": "ACME"}).headline
    title = card.cut(f"Approve? {headline}", card.TITLE_CHARS)
    assert rendered["main_title"] == {"title": title}  # gate's words alone
    facts = {f["keyname"]: f["value"] for f in rendered["horizontal_content_list"]}
    assert facts["Claim"] == "Pay ACME 60k"  # the agent's words: after the call, a claim
    assert facts["ID"] == "01JD0000000000000000000000"
    shown = (facts["Agent"], facts["User"], facts["Rule"])
    assert shown == ("billing-agent", "dave", "big-payments")
    assert facts["Due"] == "in 10 min (10:10 UTC)"
    call = as_text(render_call("pay_vendor", {"amount": 60000, "vendor": "ACME"})).text
    assert rendered["sub_title_text"].startswith(f"Call: {call}\n")
    keys = [b.get("key") for b in rendered["button_list"]]
    assert keys[:3] == ["approve", "reject", "edit"] and keys[3].startswith("extend-")
    assert "button_selection" not in rendered  # the rule offers no grants


def test_the_extend_key_carries_the_deadline_to_the_microsecond() -> None:
    view = make_view()
    key = card.extend_key(view)
    assert card.shown_deadline(key.partition("-")[2]) == view.expires_at
    assert card.shown_deadline("²") is None and card.shown_deadline("9" * 30) is None


def test_grants_are_a_dropdown_with_short_labels() -> None:
    view = make_view(offers=Offers(grant_scopes=("session", "agent"), max_grant=timedelta(hours=1)))
    rendered = card.render_card(view, TASK, now=NOW)
    assert check_card(rendered) == []
    options = rendered["button_selection"]["option_list"]
    assert [o["id"] for o in options] == [
        "call", "session:1800s", "session:3600s", "agent:1800s", "agent:3600s",
    ]  # fmt: skip
    assert [o["text"] for o in options][1:3] == ["+session 30 min", "+session 1 h"]


def test_a_final_card_has_no_buttons_and_says_what_happened() -> None:
    view = make_view(
        status="rejected", decided_by="bob", decided_via="wecom", reason="Split it in two"
    )
    rendered = card.render_card(view, TASK, now=NOW)
    assert check_card(rendered) == []
    assert rendered["card_type"] == "text_notice" and "button_list" not in rendered
    assert "task_id" not in rendered
    assert rendered["sub_title_text"] == "Rejected by bob in WeCom. Split it in two"


def test_hostile_text_is_cleaned_cut_and_links_only_go_to_gate() -> None:
    view = make_view(
        tool_name=HOSTILE,
        summary=HOSTILE,
        agent_id=HOSTILE,
        user_id=HOSTILE,
        tool_args={HOSTILE: HOSTILE, "password": "hunter2-secret", "blob": "x" * 100_000},
    )
    for rendered in (
        card.render_card(view, TASK, now=NOW),
        card.render_card(replace(view, status="approved", decided_by="alice"), TASK, now=NOW),
    ):
        assert check_card(rendered) == []  # every field within WeCom's documented length
        text = json.dumps(rendered, ensure_ascii=False)
        for bad in ("\u202e", "\u200b", "\x1b", "hunter2", "xoxb-1234567890"):
            assert bad not in text
        assert set(urls(rendered)) == {URL}
        assert "enable_id_trans" not in rendered


def test_the_reasons_form_lists_the_presets() -> None:
    presets = ("wrong customer", "a reason far too long to show")
    view = make_view(offers=Offers(reject_reasons=presets))
    form = card.reasons_form(view, "why-01JD0000000000000000000000-abcdef12")
    assert check_card(form) == []
    assert [o["text"] for o in form["checkbox"]["option_list"]] == [
        "wrong customer",
        "a reason far too…",
    ]
    assert [o["id"] for o in form["checkbox"]["option_list"]] == ["r0", "r1"]


@pytest.mark.parametrize(
    ("task", "parsed"),
    [
        ("gate-01JD-abcdef12", ("gate", "01JD")),
        ("why-01JD-1234", ("why", "01JD")),
        ("gate-01JD", None),
        ("other-01JD-x", None),
        ("", None),
    ],
)
def test_task_ids_name_their_request(task: str, parsed: tuple[str, str] | None) -> None:
    assert card.request_of(task) == parsed


def test_the_fake_accepts_the_docs_example_and_refuses_broken_cards() -> None:
    docs = Path(__file__).parent / "fixtures" / "button_interaction_docs.json"
    example = json.loads(docs.read_text())["template_card"]
    # The docs' own example is longer than the recommended lengths: those are not hard limits.
    assert check_card(example, strict=False) == []
    broken = {**example, "task_id": "has space", "button_list": [{"text": "x"}] * 7}
    problems = check_card(broken, strict=False)
    assert any("task_id" in p for p in problems) and any("1 to 6" in p for p in problems)


def test_the_edit_template_fits_one_text_message() -> None:
    from channels.wecom import answers

    args = {f"k{i}": "v" * 400 for i in range(10)} | {"a<b": 1, "x=y": 2, "ok": "<tag>"}
    template = answers.edit_template(make_view(tool_args=args))
    assert len(answers.safe_text(template).encode()) <= answers.TEXT_BYTES
    assert template == answers.safe_text(template)  # nothing in it is altered when sent
    lines = template.splitlines()
    assert lines[1] == "edit 01JD0000000000000000000000"
    assert all(line.startswith("k") for line in lines[2:-1])
    assert "more can be edited in gate" in lines[-1]


def test_private_text_cannot_open_a_link_or_hide_characters() -> None:
    from channels.wecom import answers

    shown = answers.safe_text('<a href="https://evil.example">Approve</a>\u202e' + "字" * 1000)
    assert "<" not in shown and "\u202e" not in shown
    assert len(shown.encode()) <= answers.TEXT_BYTES
