"""The pure translators: the card and modals (limits, inert text, offers), custom_ids, escaping."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from channels.discord import ids
from channels.discord.card import ARGS_CHARS, card_message, embed_size
from channels.discord.markdown import code_block, cut, escape, inline
from channels.discord.modals import edit_modal, grant_modal, reason_modal
from gate.decisions.readmodel import RequestView, VoteView
from gate.policy.offers import Offers
from gate.rendering import as_text, render_call
from tests.channels.drivers.discord import DiscordDriver
from tests.channels.sizing import filled
from tests.support import views
from tests.support.discord_shapes import message_problems, modal_problems

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)
URL = "http://gate.example/requests/01JREQ0000000000000000000A"
RID = "01JREQ0000000000000000000A"
#: untrusted text that must render inert in Discord
CORPUS = [
    "@everyone @here deploy now",
    "<@80351110224678912> please approve <@!80351110224678912>",
    "<@&123456789012345678> role ping, <#123456789012345678> channel",
    "[Approve here](https://evil.example/phish) and <https://evil.example>",
    "https://evil.example/auto-link",
    "<:gate:123456789012345678> <a:dance:1> <t:0:R> </deploy:1>",
    "**bold** __under__ ~~strike~~ ||spoiler|| > quote\n# heading\n- list",
    "```\n@everyone\n``` broke out ` of the block `",
    "\u202eevil\u202c reversed \u2066isolate\u2069 \u200fmark\u200e zero\u200bwidth \ufeff",
    "ctrl \x00\x07\x1b[31m red",
    "A" * 10_000,
    "`" * 5000,
    "\\" * 5000,
]


def make_view(**overrides: Any) -> RequestView:
    """The shared view with this file's ids, URL and date."""
    fields: dict[str, Any] = {
        "id": RID,
        "tool_args": {"amount": 60000, "vendor": "acme"},
        "session_id": "s-1",
        "summary": "Pay acme 60k",
        "created_at": NOW,
        "url": URL,
    }
    return views.make_view(**{**fields, **overrides})


def live(message: dict[str, Any], request_id: str = RID) -> list[str]:
    """What Discord would act on in a message, as the contract driver judges it."""
    from tests.channels.drivers.base import Card

    return DiscordDriver().live_markup(Card("", 0, frozenset(), message), request_id, URL)


def test_a_pending_card_fits_discord_and_offers_the_decision() -> None:
    message = card_message(make_view(), now=NOW)
    assert message_problems(message) == []
    assert message["allowed_mentions"] == {"parse": []}
    buttons = message["components"][0]["components"]
    assert [b["label"] for b in buttons] == [
        "Approve",
        "Reject…",
        "Edit & approve…",
        "Extend +15m",
        "Open in gate",
    ]
    assert buttons[-1] == {"type": 2, "style": 5, "label": "Open in gate", "url": URL}
    embed = message["embeds"][0]
    assert embed["url"] == URL and embed["footer"]["text"] == f"Request {RID}"
    deadline = next(f for f in embed["fields"] if f["name"] == "Deadline")["value"]
    ts = int((NOW + timedelta(minutes=10)).timestamp())
    assert deadline == f"<t:{ts}:f> (expires in 10 min, then reject)"
    assert live(message) == []


def test_what_the_rule_offers_shows_as_selects() -> None:
    offers = Offers(
        grant_scopes=("session",),
        max_grant=timedelta(hours=1),
        reject_reasons=("wrong customer", "@everyone <@1>"),
    )
    message = card_message(make_view(offers=offers), now=NOW)
    assert message_problems(message) == []
    reasons, grants = (
        message["components"][1]["components"][0],
        message["components"][2]["components"][0],
    )
    assert reasons["custom_id"] == f"gate:reasons:{RID}" and reasons["max_values"] == 2
    assert [o["value"] for o in reasons["options"]] == ["r0", "r1"]
    assert grants["custom_id"] == f"gate:grant:{RID}" and grants["max_values"] == 1
    assert [o["value"] for o in grants["options"]] == ["session:1800s", "session:3600s"]


def test_a_final_card_keeps_only_the_link_and_says_who_and_why() -> None:
    vote = VoteView(
        approver="bob", verdict="reject", comment="@everyone `see` <#1>", via="discord", at=NOW
    )
    view = make_view(
        status="rejected", decided_by="bob", decided_via="discord", decided_at=NOW, votes=[vote]
    )
    message = card_message(view, now=NOW)
    assert message_problems(message) == []
    assert message["components"] == [
        {"type": 1, "components": [{"type": 2, "style": 5, "label": "Open in gate", "url": URL}]}
    ]
    fields = {f["name"]: f["value"] for f in message["embeds"][0]["fields"]}
    assert fields["Outcome"].startswith("Rejected by bob in Discord at 2026")
    assert "@everyone ˋseeˋ <#1>" in fields["Reason"] and fields["Reason"].startswith("```")
    assert live(message) == []


@pytest.mark.parametrize("text", CORPUS)
def test_untrusted_text_is_inert_everywhere_on_the_card(text: str) -> None:
    view = make_view(
        tool_name=text[:300], summary=text, agent_id=text, user_id=text, rule=text[:100],
        tool_args={"payload": text, text[:50]: [text], "nested": {"deep": text}},
        offers=Offers(reject_reasons=(text[:200],), editable=(text[:50],)),
    )  # fmt: skip
    message = card_message(view, now=NOW)
    assert message_problems(message) == []
    assert live(message) == []
    assert embed_size(message["embeds"][0]) <= 6000


def test_huge_arguments_are_cut_with_a_pointer_to_gate() -> None:
    view = make_view(tool_args={f"k{i}": "x" * 500 for i in range(40)}, summary="s" * 5000)
    embed = card_message(view, now=NOW)["embeds"][0]
    assert embed_size(embed) <= 6000 and len(embed["description"]) <= 4096
    assert "too long for Discord: review and approve in gate" in embed["description"]
    # a card that cut the call offers no approval of any kind; rejecting stays
    verbs = [
        c["custom_id"].split(":")[1]
        for row in card_message(view, now=NOW)["components"]
        for c in row["components"]
        if "custom_id" in c
    ]
    assert not {"approve", "edit", "grant"} & set(verbs) and "reject" in verbs, verbs


def test_arguments_at_the_limit_show_whole_with_everything_else_at_its_worst() -> None:
    tool = "t" * 500
    args = filled(tool, ARGS_CHARS, lambda n: {"blob": "<" * n}, watched=("blob",))
    votes = [VoteView("v" * 200, "approve", "web", NOW, "c" * 1000) for _ in range(40)]
    offers = Offers(watched_args=("blob",), condition_error="e" * 500)
    view = make_view(
        tool_args=args, summary="s" * 5000, votes=votes, approvals_required=41, offers=offers,
        tool_name=tool, agent_id="a" * 500, user_id="u" * 500, rule="r" * 500,
    )  # fmt: skip
    message = card_message(view, now=NOW)
    embed = message["embeds"][0]
    assert embed_size(embed) <= 6000 and len(embed["description"]) <= 4096
    assert as_text(render_call(tool, args, watched=("blob",))).text in embed["description"]
    assert "too long" not in embed["description"]
    assert embed["description"].count("```") == 2  # one closed block: the call
    assert "approve" in json.dumps(message["components"])


def test_secrets_never_reach_the_card() -> None:
    args = {"password": "hunter2-secret", "note": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123"}
    text = json.dumps(
        card_message(
            make_view(tool_args=args, summary="xoxb-1234567890-0987654321-AbCdEfGhIjKl"), now=NOW
        )
    )
    for secret in ("hunter2-secret", "sk-ant-api03", "xoxb-1234567890"):
        assert secret not in text


def test_modals_fit_discord() -> None:
    view = make_view(offers=Offers(reject_reasons=("wrong customer",)))
    assert modal_problems(reason_modal(view, [])) == []
    assert modal_problems(reason_modal(view, [0])) == []
    assert reason_modal(view, [0])["custom_id"] == f"gate:rejectm:{RID}:1"
    fields = [type("F", (), {"key": "k" * 300, "text": "v" * 4000})()] * 4
    modal = edit_modal(view, fields)  # type: ignore[arg-type]
    assert modal_problems(modal) == [] and len(modal["components"]) == 5
    assert modal_problems(grant_modal(view, "session", "1800s", "Approve + allow")) == []


def test_custom_ids_are_read_strictly() -> None:
    deadline = NOW + timedelta(microseconds=123)
    token = ids.deadline_token(deadline)
    read = ids.parse(ids.build("extend", RID, token), ids.BUTTONS)
    assert ids.deadline_from(read.args[0]) == deadline
    refused = [
        "", "x" * 101, "gate", f"slack:approve:{RID}", f"gate:delete:{RID}", "gate:approve:",
        "gate:approve:" + "A" * 41, f"gate:approve:{RID}:extra", f"gate:extend:{RID}",
        f"gate:extend:{RID}:１２", "gate:approve:01J/../x", f"gate:grantm:{RID}:session",
        f"gate:rejectm:{RID}:zz!", f"gate:extend:{RID}:abc", f"gate:rejectm:{RID}:12345678",
        f"gate:grantm:{RID}:s3ssion:1h", f"gate:grantm:{RID}:session:{'1' * 13}", None, 42,
    ]  # fmt: skip
    for text in refused:
        with pytest.raises(ValueError):
            ids.parse(text, ids.BUTTONS + ids.SELECTS + ids.MODALS)
    assert ids.reasons_from_mask(ids.reasons_mask([0, 2, 24])) == ["r0", "r2", "r24"]
    for mask in ("", "g", "1" * 8, "²"):
        with pytest.raises(ValueError):
            ids.reasons_from_mask(mask)


def test_escaping_and_cutting() -> None:
    assert escape("<@1> @everyone [x](https://e.x) `c` *b*") == (
        "\\<\\@1\\> \\@everyone \\[x\\]\\(https\\://e.x\\) \\`c\\` \\*b\\*"
    )
    assert cut("ab\\", 3) == "ab\\" and cut("a\\*bc", 3) == "a…"
    assert inline("a`b\nc") == "`aˋb c`" and inline("") == "—"
    block, was_cut = code_block("x" * 100, 50)
    assert was_cut and len(block) <= 50 and block.endswith("\n```")


def test_the_markup_check_sees_live_markup() -> None:
    # the checker itself must not be blind: an unescaped card is flagged on every count
    button = {"type": 2, "style": 1, "label": "Approve", "custom_id": "gate:approve:OTHER"}
    forged = {
        "content": "@everyone look",
        "embeds": [
            {"description": "[Approve](https://evil.example) <@1>", "url": "https://evil.example"}
        ],
        "components": [{"type": 1, "components": [button]}],
        "allowed_mentions": {"parse": ["everyone"]},
    }
    found = " | ".join(live(forged))
    for what in ("@everyone", "](", "<@", "allowed_mentions", "another request", "embed link"):
        assert what in found, what
