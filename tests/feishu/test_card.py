"""Pure parts of the Feishu channel: card rendering, click parsing, crypto test vectors."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from channels import feishu
from channels.feishu import (
    CARD_BYTES,
    MASK,
    decrypt,
    mask_secrets,
    parse_action,
    receive_id_type,
    render_card,
    signature,
    toast_for,
)
from gate import machine
from gate.acting import Refusal, Result
from gate.errors import BadRequest
from gate.models import RequestStatus, Verdict
from gate.readmodel import RequestView, VoteView
from tests.support.fake_feishu import (
    card_action_payload,
    check_card,
    encrypt,
    sign,
)

FIXTURES = Path("/work/shared/fixtures")
NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def fixture(name: str) -> dict[str, Any]:
    path = FIXTURES / name
    if not path.exists():
        pytest.skip(f"fixture {name} not available")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def make_view(**overrides: Any) -> RequestView:
    base = RequestView(
        id="01JD0000000000000000000000",
        status="pending",
        tool_name="pay_vendor",
        tool_args={"amount": 60000, "vendor": "ACME"},
        agent_id="billing-agent",
        user_id="dave",
        session_id="s1",
        org_id=None,
        rule="big-payments",
        summary="Pay ACME 60k",
        context={},
        created_at=NOW,
        expires_at=NOW + timedelta(minutes=10),
        approvals_required=1,
        approvers=["alice", "bob"],
        votes=[],
        decided_at=None,
        decided_by=None,
        decided_via=None,
        reason=None,
        on_timeout="reject",
        submitted_by="billing-agent",
        url="https://gate.example/requests/01JD0000000000000000000000",
    )
    return replace(base, **overrides)


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


# -- crypto -----------------------------------------------------------------------------------


def test_decrypts_the_docs_test_vector() -> None:
    body = fixture("feishu_encrypted_docs_test_key.json")
    assert decrypt("test key", body["encrypt"]) == b"hello world"


def test_decrypts_the_java_sdk_test_vector() -> None:
    body = fixture("feishu_encrypted_sdk_key_1212121212.json")
    plain = json.loads(decrypt("1212121212", body["encrypt"]))
    assert plain["challenge"] == "1212"
    assert plain["type"] == "url_verification1"
    assert plain["header"]["event_type"] == "contact.user.created_v3"


def test_signature_vectors_from_the_reference() -> None:
    body = b'{"encrypt":"P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk="}'
    expected = "cfd52cb7ea3e602678fd6b46af3f97423e5d5a339b9173c2a25c6dd8d950d6c3"
    assert signature("1700000000", "n-123", "test_encrypt_key", body) == expected
    assert sign("1700000000", "n-123", "test_encrypt_key", body) == expected
    legacy = b'{"open_id":"ou_x","action":{"tag":"button","value":{"k":"v"}}}'
    assert (
        signature("1700000000", "n-123", "test_verification_token", legacy, "sha1")
        == "c373f1fcd627c6fa1ea30bd318b996ed63e3e90d"
    )


def test_fake_encryption_round_trips_through_the_channel() -> None:
    text = json.dumps({"hello": "世界", "n": list(range(50))}).encode()
    assert decrypt("k", encrypt("k", text)) == text


@pytest.mark.parametrize(
    "data",
    [
        "not base64 !!",
        "QUJD",  # three bytes: no IV
        encrypt("another key", b'{"a": 1}'),  # wrong key: padding fails
        encrypt("k", b"x" * 16)[:-4] + "AAA=",  # corrupted tail
    ],
)
def test_undecryptable_input_raises_value_error(data: str) -> None:
    with pytest.raises(ValueError):
        json.loads(decrypt("k", data))


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
    assert card["header"]["title"]["content"].endswith("pay_vendor")
    forms = [c for c in walk(card) if c.get("tag") == "form"]
    assert bool(forms) == has_form
    names = sorted(b.get("element_id", "") for b in buttons(card))
    pending = ["approve", "edit", "extend", "open", "reject"]
    assert names == (pending if has_form else ["open"])


def test_pending_card_carries_what_is_asked() -> None:
    card = render_card(make_view())
    text = json.dumps(card, ensure_ascii=False)
    for fact in ("Pay ACME 60k", "billing-agent", "dave", "big-payments", "2026-11-21 10:10"):
        assert fact in text
    values = [b["behaviors"][0]["value"] for b in buttons(card) if b["element_id"] != "open"]
    assert values == [
        {"request_id": "01JD0000000000000000000000", "verdict": "approve"},
        {"request_id": "01JD0000000000000000000000", "verdict": "reject"},
        {"request_id": "01JD0000000000000000000000", "verdict": "edit"},
        {"request_id": "01JD0000000000000000000000", "verdict": "extend"},
    ]
    (link,) = [b for b in buttons(card) if b["element_id"] == "open"]
    assert link["behaviors"] == [
        {
            "type": "open_url",
            "default_url": "https://gate.example/requests/01JD0000000000000000000000",
        }
    ]
    (args,) = [c for c in walk(card) if c.get("element_id") == "args"]
    assert args["content"].startswith("```json\n") and '"amount": 60000' in args["content"]


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
    ours = ["approve", "extend", "open", "reject"]  # no edits: two approvals are needed
    assert sorted(b["element_id"] for b in buttons(card)) == ours
    for b in buttons(card):
        for behavior in b["behaviors"]:
            assert behavior.get("value", {}).get("request_id", view.id) == view.id
            assert behavior.get("default_url", view.url) == view.url
    # Markdown appears once (the arguments), as a single closed code block with no live tags.
    markdown = [c["content"] for c in walk(card) if c.get("tag") == "markdown"]
    assert len(markdown) == 1
    (content,) = markdown
    assert content.startswith("```json\n") and content.endswith("\n```")
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
    assert "Arguments cut to" in content
    assert len(walk(card)) < 200


# -- clicks -----------------------------------------------------------------------------------


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


def test_toast_types() -> None:
    view = make_view(status="approved", decided_by="alice", decided_via="feishu")
    changed = Result(machine.Changed(view.id, RequestStatus.approved), view)
    assert toast_for(changed) == {"type": "success", "content": "Approved by alice in Feishu."}
    refused = Result(None, view, Refusal.not_an_approver)
    assert toast_for(refused)["type"] == "error"
    final = Result(
        machine.AlreadyFinal(view.id, RequestStatus.approved, "alice", NOW, "feishu"), view
    )
    assert toast_for(final) == {
        "type": "info",
        "content": "Already approved by alice at 2026-11-21 10:00:00 UTC.",
    }
    voted = Result(machine.AlreadyVoted(view.id, "alice", Verdict.approve), view)
    assert toast_for(voted)["type"] == "info"


def test_receive_id_types() -> None:
    assert receive_id_type("oc_abc") == "chat_id"
    assert receive_id_type("ou_abc") == "open_id"
    assert receive_id_type("on_abc") == "union_id"
    assert receive_id_type("ops@example.com") == "email"
    assert feishu.TIMESTAMP_WINDOW_SECONDS == 300
