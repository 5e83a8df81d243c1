"""The Feishu card as a pure function of a request's view: state, facts, hostile text, size."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from channels.feishu import CARD_BYTES, MASK, mask_secrets, render_card
from channels.feishu.card import ARGS_CHARS
from gate.decisions.readmodel import VoteView
from gate.rendering import render_call
from tests.channels.sizing import filled
from tests.support.fake_feishu import check_card
from tests.support.views import make_view

FIXTURES = Path("/work/shared/fixtures")
NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def fixture(name: str) -> dict[str, Any]:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"fixture {name} not available")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def walk(node: Any) -> list[dict[str, Any]]:
    """Every component in a card, depth first."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if "tag" in node:
            found.append(node)
        for value in node.values():
            found.extend(walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(walk(value))
    return found


def buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in walk(card) if c.get("tag") == "button"]


# -- the card ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "template", "has_form"),
    [
        ("pending", "orange", True),
        ("approved", "green", False),
        ("rejected", "red", False),
        ("expired", "grey", False),
        ("cancelled", "grey", False),
    ],
)
def test_card_colour_and_buttons_follow_the_state(
    status: str, template: str, has_form: bool
) -> None:
    view = make_view(
        status=status,
        decided_by=None if status == "pending" else "alice",
        decided_via=None if status == "pending" else "feishu",
        reason=None if status == "pending" else "Approved by alice in Feishu",
    )
    card = render_card(view)
    assert check_card(json.dumps(card)) == []
    assert card["schema"] == "2.0"
    assert card["header"]["template"] == template
    headline = render_call("pay_vendor", {"amount": 60000, "vendor": "ACME"}).headline
    assert card["header"]["title"]["content"].endswith(headline)
    forms = [c for c in walk(card) if c.get("tag") == "form"]
    assert bool(forms) == has_form
    names = sorted(b.get("element_id", "") for b in buttons(card))
    pending = ["acknowledge", "approve", "edit", "extend", "open", "reject"]
    assert names == (pending if has_form else ["open"])


def test_pending_card_carries_what_is_asked() -> None:
    view = make_view()
    card = render_card(view)
    text = json.dumps(card, ensure_ascii=False)
    for fact in ("Pay ACME 60k", "billing-agent", "dave", "big-payments", "2026-11-21 10:10"):
        assert fact in text
    values = [b["behaviors"][0]["value"] for b in buttons(card) if b["element_id"] != "open"]
    assert values == [
        {"request_id": "01JD0000000000000000000000", "verdict": "approve"},
        {"request_id": "01JD0000000000000000000000", "verdict": "reject"},
        {"request_id": "01JD0000000000000000000000", "verdict": "edit"},
        # Extend also carries the deadline the card showed: a repeated click extends once
        {
            "request_id": "01JD0000000000000000000000",
            "verdict": "extend",
            "shown": view.expires_at.isoformat(),
        },
        {"request_id": "01JD0000000000000000000000", "verdict": "acknowledge"},
    ]
    (link,) = [b for b in buttons(card) if b["element_id"] == "open"]
    assert link["behaviors"] == [
        {
            "type": "open_url",
            "default_url": "https://gate.example/requests/01JD0000000000000000000000",
        }
    ]
    (args,) = [c for c in walk(card) if c.get("element_id") == "args"]
    assert args["content"].startswith("```\n") and "amount: 60000" in args["content"]


def test_quorum_progress_turns_blue_and_lists_votes() -> None:
    vote = VoteView("alice", "approve", "feishu", NOW, "ok")
    card = render_card(make_view(approvals_required=2, votes=[vote]))
    assert card["header"]["template"] == "blue"
    text = json.dumps(card)
    assert "Waiting for approval (1 of 2)" in text
    assert "alice approved via feishu: ok" in text


INJECTIONS = [
    "<at id=all></at>",
    '<at user_id="ou_mallory">boss</at>',
    "<at ids=ou_a,ou_b></at>",
    "<at email=ceo@example.com></at>",
    "[Approve here](https://evil.example/phish)",
    "<a href='https://evil.example'>Approve</a>",
    "<link url=https://evil.example>x</link>",
    "<font color=red>URGENT</font>",
    "<person id=ou_boss></person>",
    "![img](img_v2_evil)",
    "```\n</code>\n**fake approve button**\n```",
    '"}]},{"tag":"button","text":{"tag":"plain_text","content":"Approve"},'
    '"behaviors":[{"type":"callback","value":{"request_id":"other","verdict":"approve"}}]}',
    "&#60;at id=all&#62;&#60;/at&#62;",
    "evil\u202egnp.exe",
    "zero\u200bwidth\u2066isolate\u2069",
    "line\x00null\x1b[31mansi",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_corpus_renders_inert(payload: str) -> None:
    vote = VoteView("alice", "approve", "feishu", NOW, payload)
    view = make_view(
        tool_name=f"pay_{payload}",
        tool_args={"memo": payload, payload: [payload]},
        summary=payload,
        agent_id=payload,
        user_id=payload,
        rule=payload,
        votes=[vote],
        approvals_required=2,
    )
    card = render_card(view)
    dumped = json.dumps(card, ensure_ascii=False)
    assert check_card(dumped) == []
    # Exactly our buttons, with exactly our values.
    # no edits: two approvals are needed
    ours = ["acknowledge", "approve", "extend", "open", "reject"]
    assert sorted(b["element_id"] for b in buttons(card)) == ours
    for b in buttons(card):
        for behavior in b["behaviors"]:
            assert behavior.get("value", {}).get("request_id", view.id) == view.id
            assert behavior.get("default_url", view.url) == view.url
    # Markdown appears once (the arguments), as a single closed code block with no live tags.
    markdown = [c["content"] for c in walk(card) if c.get("tag") == "markdown"]
    assert len(markdown) == 1
    (content,) = markdown
    assert content.startswith("```\n") and content.endswith("\n```")
    assert content.count("```") == 2
    assert "<" not in content and ">" not in content
    # Everything else is plain_text, and nothing anywhere reads as a tag.
    texts = [c for c in walk(card) if c.get("tag") in ("lark_md",)]
    assert texts == []
    for el in walk(card):
        if el.get("tag") == "plain_text":
            assert "<at" not in el["content"] and "<a " not in el["content"]
            assert "<link" not in el["content"] and "<font" not in el["content"]
    for control in ("\u202e", "\u200b", "\u2066", "\x00", "\x1b"):
        assert control not in dumped


def test_secrets_are_masked() -> None:
    args = {
        "password": "hunter2",
        "api_key": "abc123",
        "AWS_SECRET_ACCESS_KEY": "x" * 40,
        "headers": {"Authorization": "Bearer abcdefghijklmnop1234"},
        "note": "use sk-abcdefghijklmnopqrstuvwx and ghp_abcdefghijklmnopqrstuvwxyz0123",
        "dsn": "postgresql://app:s3cr3t@db.internal/prod",
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sflKxwRJSMeKKF2QT4fwpM",
        "amount": 5,
        "items": [{"token": "t-abc"}],
    }
    masked = mask_secrets(args)
    assert masked["password"] == masked["api_key"] == masked["AWS_SECRET_ACCESS_KEY"] == MASK
    assert masked["headers"]["Authorization"] == MASK
    assert masked["items"] == [{"token": MASK}]
    assert "sk-abc" not in masked["note"] and "ghp_" not in masked["note"]
    assert masked["dsn"] == f"postgresql://{MASK}@db.internal/prod"  # user and password
    assert masked["jwt"] == MASK
    assert masked["amount"] == 5
    dumped = json.dumps(render_card(make_view(tool_args=args)))
    for secret in ("hunter2", "abc123", "s3cr3t", "abcdefghijklmnop1234", "sflKxw"):
        assert secret not in dumped


def test_huge_arguments_are_cut_to_fit_the_size_limit() -> None:
    args = {f"k{i}": "€" * 500 for i in range(400)}  # ~600 KB of UTF-8
    votes = [VoteView(f"p{i}", "approve", "web", NOW, "c" * 1000) for i in range(300)]
    card = render_card(make_view(tool_args=args, votes=votes, approvals_required=20))
    content = json.dumps(card, ensure_ascii=False)
    assert len(content.encode()) <= CARD_BYTES
    assert check_card(content) == []
    assert "The call is too long for Feishu: review and approve in gate." in content
    assert len(walk(card)) < 200
    # a card that cut the call offers no approval of any kind; rejecting stays
    assert '"approve"' not in content and "Edit & approve" not in content
    assert '"reject"' in content


def test_arguments_at_the_limit_show_whole_with_everything_else_at_its_worst() -> None:
    # Whole arguments never shrink (the votes give way), so gate's check on an approval,
    # which measures the same text, cannot pass a call the card cut.
    args = filled("pay_vendor", ARGS_CHARS, lambda n: {"blob": "😀" * n})  # four bytes each
    votes = [VoteView("😀" * 200, "approve", "web", NOW, "😀" * 1000) for i in range(300)]
    view = make_view(tool_args=args, votes=votes, approvals_required=301, summary="😀" * 9000)
    card = render_card(view)
    content = json.dumps(card, ensure_ascii=False)
    assert len(content.encode()) <= CARD_BYTES and check_card(content) == []
    assert args["blob"] in content and "too long" not in content
    assert '"approve"' in content
