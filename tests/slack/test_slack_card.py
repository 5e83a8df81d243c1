"""The pure translators: render_card (escaping, masking, limits), parse_interaction (payloads)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from channels.slack.callback import Interaction, form_payload, parse_interaction
from channels.slack.card import fallback_text, render_card
from channels.slack.modals import reason_modal
from channels.slack.mrkdwn import ARGS_CHARS, cut, escape
from gate.decisions.readmodel import RequestView, VoteView
from gate.policy.offers import Offers
from gate.rendering import as_text, render_call
from gate.text.untrusted import mask_value
from tests.channels.sizing import filled
from tests.support import views
from tests.support.fake_slack import check_blocks, check_modal

PAYLOADS = Path(__file__).resolve().parent / "payloads"
NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
URL = "http://gate.example/requests/01JREQ"

#: untrusted text that must render inert
CORPUS = [
    "<!here> deploy now",
    "<!channel>",
    "<!everyone>",
    "<@U0ALICE> please approve",
    "<#C0APPROVALS>",
    "<!subteam^S0123|@finance>",
    "<https://evil.example|Approve>",
    "<https://evil.example>",
    "<mailto:x@evil.example|mail>",
    "<!date^1392734382^{date}|Feb 18>",
    "&lt;!here&gt; pre-escaped",
    "*bold* _italic_ ~strike~ `code` > quote",
    "```\n<!channel>\n``` break out of the block",
    "https://evil.example/auto-link @here #general",
    "\u202eevil\u202c reversed \u2066isolate\u2069 \u200fmark\u200e zero\u200bwidth \ufeff",
    "ctrl \x00\x07\x1b[31m red",
    "A" * 10_000,
    "&" * 5000,
    "<" * 5000,
]
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
SECRETS = [
    "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
    "sk-proj-abcdefghijklmnopqrstuv",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    JWT,
    "hunter2-from-password",
    "pa55w0rd-in-url",
]
SECRET_ARGS: dict[str, Any] = {
    "password": "hunter2-from-password",
    "config": {"api_key": "whatever-value-1", "AWS_SECRET_ACCESS_KEY": "whatever-value-2"},
    "headers": {"Authorization": "Bearer abcdefghijklmnop"},
    "command": "curl -H 'token: abcdefghijklmnop' https://bob:pa55w0rd-in-url@db.example/x",
    "env": "SLACK_TOKEN=xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp",
    "note": "key AKIAIOSFODNN7EXAMPLE and sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
    "list": ["ghp_abcdefghijklmnopqrstuvwxyz0123456789", "sk-proj-abcdefghijklmnopqrstuv"],
    "jwt": JWT,
    "max_tokens": 1000,
}
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u200b\ufeff\x00-\x08\x1b]")


def make_view(**overrides: Any) -> RequestView:
    """The shared view with this file's id and URL, outside any session."""
    fields: dict[str, Any] = {
        "id": "01JREQ",
        "tool_args": {"amount": 60000, "vendor": "acme"},
        "session_id": None,
        "summary": "Pay acme 60k",
        "url": URL,
    }
    return views.make_view(**{**fields, **overrides})


def rendered(view: RequestView) -> str:
    """Everything Slack receives for the card, as one string."""
    return json.dumps(
        {"text": fallback_text(view), "blocks": render_card(view)}, ensure_ascii=False
    )


def assert_inert(text: str) -> None:
    """No live Slack syntax: the only `<...>` are our own link and our deadline's date."""
    ours = f"<{URL}|"
    without_ours = re.sub(re.escape(ours) + r"[^>|<]*>", "", text)
    without_ours = re.sub(
        r"<!date\^\d+\^\{date_short_pretty\} \{time\}\|[0-9: -]+UTC>", "", without_ours
    )
    assert "<" not in without_ours and ">" not in without_ours
    assert "@here" not in text.replace("@here #general", "")  # only inside inline code
    assert not BIDI.search(text)


def _injected(value: str) -> RequestView:
    return make_view(
        tool_name=value[:300],
        summary=value,
        agent_id=value,
        user_id=value,
        rule=value[:100],
        tool_args={"payload": value, value[:50]: [value], "nested": {"deep": value}},
    )


@pytest.mark.parametrize("value", CORPUS, ids=range(len(CORPUS)))
def test_injection_corpus_renders_inert_and_within_limits(value: str) -> None:
    view = _injected(value)
    text = rendered(view)
    assert_inert(text)
    check_blocks(render_card(view), max_blocks=50)
    assert len(fallback_text(view)) <= 4000


@pytest.mark.parametrize("status", ["approved", "rejected", "expired", "cancelled"])
@pytest.mark.parametrize("value", CORPUS[:6] + CORPUS[-3:], ids=range(9))
def test_final_cards_are_inert_too(status: str, value: str) -> None:
    vote = VoteView("alice", "reject" if status == "rejected" else "approve", "slack", NOW, value)
    view = _injected(value)
    view = make_view(
        **{**view.__dict__, "status": status, "votes": [vote], "decided_by": "alice"},
    )
    text = rendered(view)
    assert_inert(text)
    assert not any(b["type"] == "actions" for b in render_card(view))
    check_blocks(render_card(view), max_blocks=50)


def test_arguments_stay_inside_one_code_block() -> None:
    view = make_view(tool_args={"cmd": "```\n<!channel> *bold*\n```", "x": "`tick`"})
    [args] = [b for b in render_card(view) if b.get("block_id", "").startswith("args-")]
    text = args["text"]["text"]
    assert text.count("```") == 2 and text.startswith("*The call*\n```") and text.endswith("```")
    assert "`" not in text.removeprefix("*The call*\n```").removesuffix("```")
    assert "&lt;!channel&gt;" in text


def test_long_arguments_are_cut_with_a_link_to_the_web_page() -> None:
    view = make_view(tool_args={"blob": "x" * 10_000, "amp": "&" * 3000})
    [args] = [b for b in render_card(view) if b.get("block_id", "").startswith("args-")]
    text = args["text"]["text"]
    assert len(text) <= 3000
    # the rendering's own last line says how much is not shown, then the card's words
    assert "not shown" in text.rsplit("```", 1)[0].splitlines()[-1]
    assert text.endswith(f"too long for Slack: review and approve in gate. <{URL}|Open in gate>_")
    check_blocks(render_card(view), max_blocks=50)
    # a card that cut the call offers no approval of any kind; rejecting and extending stay
    [buttons] = [b for b in render_card(view) if b["type"] == "actions"]
    assert [e["action_id"] for e in buttons["elements"]] == [
        "gate_reject",
        "gate_extend",
        "gate_acknowledge",
    ]


def test_whole_arguments_that_escape_long_span_sections_and_keep_approve() -> None:
    # exactly ARGS_CHARS characters of gate's rendering, five times that once escaped
    view = make_view(tool_args=filled("pay_vendor", ARGS_CHARS, lambda n: {"amp": "&" * n}))
    amps = len(view.tool_args["amp"])
    blocks = render_card(view)
    args = [b for b in blocks if b.get("block_id", "").startswith("args-")]
    assert len(args) > 1 and all(len(b["text"]["text"]) <= 3000 for b in args)
    assert all(b["text"]["text"].startswith(("*The call*\n```", "```")) for b in args)
    assert sum(b["text"]["text"].count("&amp;") for b in args) == amps
    [buttons] = [b for b in blocks if b["type"] == "actions"]
    assert buttons["elements"][0]["action_id"] == "gate_approve"
    check_blocks(blocks, max_blocks=50)


def test_short_arguments_are_not_cut() -> None:
    view = make_view()
    blocks = render_card(view)
    [args] = [b["text"]["text"] for b in blocks if b.get("block_id", "").startswith("args-")]
    for line in as_text(render_call(view.tool_name, view.tool_args)).text.splitlines():
        assert escape(line) in args
    assert "not shown" not in args and "Open in gate" not in args


def test_secrets_are_masked() -> None:
    view = make_view(tool_args=SECRET_ARGS, summary="use " + SECRETS[0])
    text = rendered(view)
    for secret in SECRETS:
        assert secret not in text
    assert "[masked]" in text
    assert "max_tokens: 1000" in text  # a count of tokens is not a secret


def test_mask_value_keeps_shape() -> None:
    masked = mask_value({"password": "x1", "n": 1, "items": [{"token": "abc"}], "empty": ""})
    assert masked == {"password": "[masked]", "n": 1, "items": [{"token": "[masked]"}], "empty": ""}


def test_escape_and_cut() -> None:
    assert escape("a & <b> &amp;") == "a &amp; &lt;b&gt; &amp;amp;"
    assert cut("&amp;&amp;&amp;", 7) == "&amp;…"  # never half an entity
    assert cut("short", 10) == "short"


def test_quorum_card_counts_and_names_approvers() -> None:
    view = make_view(approvals_required=2, votes=[VoteView("alice", "approve", "slack", NOW, None)])
    text = rendered(view)
    assert "1 of 2 approvals (alice)" in text
    assert any(b["type"] == "actions" for b in render_card(view))


def test_final_card_says_who_and_when() -> None:
    view = make_view(
        status="rejected",
        decided_by="bob",
        decided_via="slack",
        decided_at=NOW,
        votes=[VoteView("bob", "reject", "slack", NOW, "too big")],
    )
    text = rendered(view)
    assert "Rejected by bob in Slack" in text and "2026-11-21 10:00 UTC" in text
    assert "too big" in text


def test_block_ids_change_with_each_update() -> None:
    before = {b.get("block_id") for b in render_card(make_view())} - {None}
    after = render_card(make_view(status="approved", decided_by="alice", decided_via="slack"))
    assert before.isdisjoint({b.get("block_id") for b in after})


def test_reason_modal_fits_slack() -> None:
    modal = reason_modal("01JREQ", "C0APPROVALS", "1700000000.000100")
    check_modal(modal)
    assert json.loads(modal["private_metadata"])["request_id"] == "01JREQ"


# -- parse_interaction ---------------------------------------------------------------------------


def _payload(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / name).read_text())
    return data


def test_real_payloads_of_other_apps_are_ignored() -> None:
    for name in (
        "slack_block_actions_button_with_state.json",
        "slack_block_actions_button_dm.json",
        "slack_block_actions_docs_example.json",
        "slack_view_submission_modal.json",
    ):
        assert parse_interaction(_payload(name)).kind == "ignore", name


def test_real_block_actions_shape_with_our_button() -> None:
    payload = _payload("slack_block_actions_button_with_state.json")
    payload["actions"][0].update(action_id="gate_approve", value="01JREQ")
    assert parse_interaction(payload) == Interaction(
        "approve",
        "U08UDKY38QK",
        "01JREQ",
        "C08VADJ7SEL",
        "1754468593.069599",
        payload["trigger_id"],
        action_ts=payload["actions"][0]["action_ts"],
    )
    payload["actions"][0]["action_id"] = "gate_reject"
    assert parse_interaction(payload).kind == "ask_reason"


def test_dm_payload_uses_channel_when_container_lacks_it() -> None:
    payload = _payload("slack_block_actions_button_dm.json")
    payload["actions"][0].update(action_id="gate_approve", value="01JREQ")
    payload["container"].pop("channel_id", None)
    action = parse_interaction(payload)
    assert action.kind == "approve" and action.channel_id == payload["channel"]["id"]


def test_real_view_submission_shape_with_our_modal() -> None:
    payload = _payload("slack_view_submission_modal.json")
    modal = reason_modal("01JREQ", "C0APPROVALS", "1700000000.000100")
    payload["view"].update(
        callback_id=modal["callback_id"],
        private_metadata=modal["private_metadata"],
        state={"values": {"reason": {"reason_input": {"value": "  not now  "}}}},
    )
    action = parse_interaction(payload)
    assert action == Interaction(
        "reject", "U01AZ88AQQ4", "01JREQ", "C0APPROVALS", "1700000000.000100", reason="not now"
    )


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "block_actions"},
        {"type": "block_actions", "user": {"id": "<!here>"}, "actions": []},
        {"type": "block_actions", "user": {"id": "U1"}, "actions": "nope"},
        {"type": "block_actions", "user": {"id": "U1"}, "actions": [{"action_id": "gate_approve"}]},
        {
            "type": "block_actions",
            "user": {"id": "U1"},
            "actions": [{"action_id": "gate_approve", "value": "x" * 65}],
        },
        {
            "type": "view_submission",
            "user": {"id": "U1"},
            "view": {"callback_id": "gate_reject_reason", "private_metadata": "{}"},
        },
    ],
)
def test_malformed_payloads_raise_value_error(payload: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        parse_interaction(payload)


def test_form_payload_reads_slacks_encoding() -> None:
    assert form_payload(b"payload=%7B%22type%22%3A%22block_actions%22%7D") == {
        "type": "block_actions"
    }
    assert form_payload(b'{"type": "x"}') == {"type": "x"}
    for bad in (b"payload=%5B%5D", b"other=1", b"payload=nope"):
        with pytest.raises(ValueError):
            form_payload(bad)


# -- gate's rendering first, the agent's words apart -----------------------------------------


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    """Each block's text in order (a context's elements joined)."""
    out = []
    for block in blocks:
        if "text" in block:
            out.append(block["text"]["text"])
        elif block["type"] == "context":
            out.append(" ".join(e["text"] for e in block["elements"]))
        else:
            out.append(json.dumps(block))
    return out


def test_the_header_is_gates_and_the_agents_summary_comes_after_the_call_labelled() -> None:
    view = make_view(
        tool_name="Bash",
        tool_args={"command": 'echo "tidy"\nrm -rf ~/.ssh && git push --force origin main'},
        summary="Pay invoice INV-4471",
    )
    blocks = render_card(view)
    texts = _texts(blocks)
    headline = render_call(view.tool_name, view.tool_args).headline
    assert texts[0] == f"Approval needed: {escape(headline)}" and "INV-4471" not in texts[0]
    assert "INV-4471" not in fallback_text(view)
    call = next(i for i, t in enumerate(texts) if t.startswith("*The call*"))
    claim = next(i for i, t in enumerate(texts) if "INV-4471" in t)
    assert call < claim < next(i for i, b in enumerate(blocks) if b["type"] == "actions")
    assert blocks[claim]["type"] == "context"  # small and grey: secondary
    assert texts[claim].startswith("*Agent's summary (the agent's claim, not checked by gate):*")
    assert "rm -rf ~/.ssh &amp;&amp; git push --force origin main" in texts[call]


def test_a_request_without_a_summary_shows_no_dash_for_it() -> None:
    blocks = render_card(make_view(summary=None))
    assert "Agent's summary" not in json.dumps(blocks)
    assert not any(t.strip(" *:") == "—" for t in _texts(blocks))
    assert "—" not in fallback_text(make_view(summary=None))


def test_a_failed_condition_and_the_arguments_it_reads_are_said() -> None:
    offers = Offers(watched_args=("amount",), condition_error="no such overload")
    texts = _texts(render_card(make_view(offers=offers)))
    said = "condition failed on this call, so gate asked a person to be safe"
    assert any(said in t for t in texts)
    assert any("`no such overload`" in t for t in texts)
    [call] = [t for t in texts if t.startswith("*The call*")]
    assert "amount: 60000   ← the rule reads this" in call
    assert not any("condition" in t for t in _texts(render_card(make_view())))
