"""The Telegram card as a pure function of a request's view: what it shows, what it offers,
hostile text kept inert, secrets masked, and Telegram's limits kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from channels.telegram.card import APPROVE, ARGS_CHARS, TEXT_LIMIT, render
from channels.telegram.tokens import Sealer
from gate.decisions.readmodel import RequestView, VoteView
from gate.policy.offers import Offers
from gate.rendering import as_text, render_call
from tests.channels.drivers.base import Card as NeutralCard
from tests.channels.drivers.telegram import TelegramDriver
from tests.channels.sizing import filled
from tests.channels.test_contract import HOSTILE, SECRETS
from tests.support import telegram_buttons
from tests.support.fake_telegram import (
    BOT_USER,
    CHAT,
    Message,
    check_markup,
    parse_html,
    utf16_length,
)
from tests.support.views import make_view

NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
REQUEST = "01JD0000000000000000000000"
URL = f"https://gate.example/requests/{REQUEST}"
SECRET = TelegramDriver.CALLBACK_SECRET
SEALER = Sealer(SECRET)


def as_message(view: RequestView) -> Message:
    """The card as the fake would hold it, after the fake's own checks."""
    card = render(view, SEALER, now=NOW)
    markup = check_markup(card.reply_markup())
    return Message(CHAT, 1, BOT_USER, [card.text], [markup], "HTML")


def shown(view: RequestView) -> str:
    text, _ = parse_html(render(view, SEALER, now=NOW).text)
    return text


def live(message: Message, request_id: str = REQUEST, own_url: str = URL) -> list[str]:
    neutral = NeutralCard(message.shown()[0], 0, frozenset(), message)
    return TelegramDriver().live_markup(neutral, request_id, own_url)


def test_a_pending_card_shows_the_question_and_who_asks() -> None:
    text = shown(make_view())
    for fact in ("Approval needed", "pay_vendor", "Pay ACME 60k", "billing-agent", "dave"):
        assert fact in text
    assert "big-payments" in text and "2026-11-21 10:10 UTC, expires in 10 min" in text
    assert "amount: 60000" in text and "Open in gate" in text
    code = telegram_buttons.code(SECRET, REQUEST)
    assert f"/approve {code}" in text and f"/reject {code} your reason" in text
    assert "Waiting for approval (0 of 1)" in text


def test_the_buttons_are_sealed_for_this_request() -> None:
    message = as_message(make_view())
    kinds = [telegram_buttons.read(SECRET, b["callback_data"]) for b in message.buttons]
    assert {kind for _, kind in kinds} == {"approve", "reject", "edit", "extend", "acknowledge"}
    assert {request for request, _ in kinds} == {REQUEST}
    assert [b["text"] for b in message.buttons[:2]] == ["Approve", "Reject…"]
    assert live(message) == []


def test_what_the_rule_offers_is_on_the_keyboard() -> None:
    offers = Offers(
        reject_reasons=("wrong customer", "too expensive"),
        grant_scopes=("session", "agent"),
        max_grant=timedelta(hours=1),
        allow_edits=False,
    )
    message = as_message(make_view(offers=offers))
    labels = [b["text"] for b in message.buttons]
    assert "Reject: wrong customer" in labels and "Reject: too expensive" in labels
    assert "Approve + allow this tool in this session for 30 min" in labels
    assert "Approve + allow this tool for this agent for 1 h" in labels
    assert "Edit & approve…" not in labels  # the rule forbids edits
    text = message.shown()[0]
    assert "preset reason" in text and "grant buttons" in text


def test_too_many_presets_leave_the_rest_to_gate() -> None:
    reasons = tuple(f"reason {i}" for i in range(20))
    message = as_message(make_view(offers=Offers(reject_reasons=reasons)))
    assert sum(b["text"].startswith("Reject: ") for b in message.buttons) == 6


def test_a_final_card_has_no_buttons_and_says_what_happened() -> None:
    vote = VoteView("bob", "reject", "telegram", NOW, "split it in two")
    view = make_view(
        status="rejected",
        decided_by="bob",
        decided_via="api",
        decided_at=NOW,
        reason="split it in two",
        votes=[vote],
    )
    card = render(view, SEALER, now=NOW)
    assert card.keyboard == [] and card.reply_markup() == {"inline_keyboard": []}
    text = shown(view)
    assert "Rejected by bob in the API" in text and "split it in two" in text
    assert "/approve" not in text and "Deadline" not in text


def test_an_approval_with_edits_shows_the_change() -> None:
    view = make_view(
        status="approved",
        decided_by="alice",
        decided_via="telegram",
        approved_args={"amount": 500, "vendor": "ACME"},
    )
    text = shown(view)
    assert "Approved with edits by alice" in text and "Changed amount: 60000 to 500" in text


def test_hostile_text_is_inert_everywhere_it_can_appear() -> None:
    vote = VoteView("bob", "approve", "slack", NOW, HOSTILE)
    view = make_view(
        tool_name=HOSTILE[:80],
        tool_args={"memo": HOSTILE, HOSTILE[:40]: [HOSTILE], "url": "https://evil.example/x"},
        agent_id=HOSTILE[:60],
        user_id="@admin tg://user?id=1 /approve@gate_test_bot",
        rule=HOSTILE[:50],
        summary=HOSTILE,
        votes=[vote],
        offers=Offers(reject_reasons=(HOSTILE[:30],)),
        approvals_required=2,
    )
    message = as_message(view)
    assert "hostile-marker" in message.shown()[0]
    assert live(message) == []
    assert "<!channel>" in message.shown()[0]  # shown as the characters it is, not dropped


def test_the_markup_check_catches_live_text() -> None:
    # The driver's check is what the contract suite trusts: it must see each way out.
    for html, why in [
        ("ping @admin now", "@admin"),
        ("see https://evil.example", "evil.example"),
        ('<a href="https://evil.example">Open in gate</a>', "away from gate"),
        ('<a href="tg://user?id=1">you</a>', "tg://"),
        ("press /approve", "/approve"),
        ("<i>urgent</i>", "italic"),
        ("zero\u200bwidth", "U+200B"),
    ]:
        message = Message(CHAT, 1, BOT_USER, [html], [None], "HTML")
        found = live(message)
        assert any(why in item for item in found), (html, found)
    # Inside <code> the same text is inert.
    inert = Message(
        CHAT, 1, BOT_USER, ["<code>@admin https://evil.example /approve</code>"], [None], "HTML"
    )
    assert live(inert) == []


def test_secrets_never_show() -> None:
    view = make_view(
        tool_args={"password": SECRETS["password"], "note": f"use {SECRETS['note']}"},
        summary=f"token {SECRETS['summary']}",
        status="rejected",
        decided_by="bob",
        decided_via="api",
        reason=f"see {SECRETS['reason']}",
    )
    text = shown(view)
    for secret in SECRETS.values():
        assert secret not in text
    assert "[masked]" in text


def test_huge_arguments_are_cut_under_telegrams_limit() -> None:
    for filler in ("x", "😀", "<&>"):  # one, two (UTF-16) and escaped-to-many characters
        view = make_view(tool_args={"blob": filler * 60_000}, summary=filler * 5000)
        card = render(view, SEALER, now=NOW)
        text, _ = parse_html(card.text)
        assert utf16_length(text) <= TEXT_LIMIT
        assert "too long for Telegram: review and approve in gate" in text
        assert "not shown" in text
        assert "Open in gate" in text
        assert APPROVE not in labels(card) and "Reject…" in labels(card)
        assert "/approve" not in text and "/reject" in text


def labels(card: Any) -> list[str]:
    return [button["text"] for row in card.keyboard for button in row]


def test_arguments_at_the_limit_show_whole_with_everything_else_at_its_worst() -> None:
    # The card keeps whole arguments whole (the other parts give way), so gate's check on an
    # approval, which measures the same text, cannot pass a call the card cut.
    wide = "😀" * 500
    args = filled(wide, ARGS_CHARS, lambda n: {"blob": "😀" * n})  # two UTF-16 units each
    votes = [
        VoteView(f"approver-{i:02}" * 8, "approve", "slack", NOW, "😀" * 5000) for i in range(40)
    ]
    offers = Offers(grant_scopes=("call", "session", "agent"), reject_reasons=("😀" * 90,) * 9)
    view = make_view(
        tool_args=args, summary="😀" * 10_000, votes=votes, approvals_required=41, offers=offers,
        agent_id=wide, user_id=wide, rule=wide, session_id="s", tool_name=wide,
    )  # fmt: skip
    card = render(view, SEALER, now=NOW)
    text, _ = parse_html(card.text)
    assert utf16_length(text) <= TEXT_LIMIT
    assert as_text(render_call(wide, args)).text in text and "too long" not in text
    assert APPROVE in labels(card)


def test_markup_characters_survive_as_text() -> None:
    view = make_view(tool_args={"q": "a < b && c > d </code><b>x</b>"})
    text = shown(view)
    assert "a < b && c > d </code><b>x</b>" in text


def test_everything_long_at_once_still_fits() -> None:
    votes = [
        VoteView(f"approver-{i:02}" * 8, "approve", "slack", NOW, "c" * 5000) for i in range(40)
    ]
    args = {f"k{i}": "v" * 3000 for i in range(30)}
    view = make_view(
        status="approved",
        decided_by="alice",
        decided_via="telegram",
        summary="s" * 10_000,
        reason="r" * 10_000,
        tool_args=args,
        approved_args=dict.fromkeys(args, "w" * 3000),
        votes=votes,
        approvals_required=40,
    )
    message = as_message(view)  # the fake's checks: parses, and fits in 4,096
    text = message.shown()[0]
    assert utf16_length(text) <= TEXT_LIMIT
    assert "Approved with edits by alice" in text and "more changes or votes" in text
