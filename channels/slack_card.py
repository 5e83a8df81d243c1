"""Slack Block Kit rendering: the approval card and the modals, as pure functions.

Card text built from tool arguments is untrusted. Every such string is cleaned by
`gate.untrusted` (capped, invisible and direction-changing characters removed, secrets
masked: the same rules as every other surface), then escaped for mrkdwn (`&`, `<`, `>`), cut
to Slack's limits, and shown only inside inline code or a code block. In the edit modal
argument values appear only as plain_text_input initial values, never as mrkdwn.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from channels import decisions
from gate import untrusted
from gate.models import utcnow
from gate.readmodel import RequestView
from gate.untrusted import MASK as MASK
from gate.untrusted import clean as clean
from gate.untrusted import mask_text as mask_text
from gate.untrusted import mask_value as mask_value

APPROVE_ACTION = "gate_approve"
REJECT_ACTION = "gate_reject"
REJECT_CALLBACK = "gate_reject_reason"
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"
REASONS_BLOCK = "reasons"
REASONS_INPUT = "reasons_input"
GRANT_ACTION = "gate_grant"
EDIT_ACTION = "gate_edit"
EDIT_CALLBACK = "gate_edit_approve"
EDIT_INPUT = "value"
COMMENT_BLOCK = "comment"
COMMENT_INPUT = "comment_input"
EXTEND_ACTION = "gate_extend"

# Slack's Block Kit limits (docs.slack.dev, and slack-sdk's own block classes).
MAX_SECTION_TEXT = 3000
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_FALLBACK_TEXT = 4000
#: what we allow one inline value (tool, agent, user...) before cutting: a card is read at
#: a glance, the web page has the rest
MAX_INLINE = 200
#: the modal's reason box; the reason is what the model is told, so a paragraph is plenty
MAX_REASON = 2000
#: plain_text_input's initial_value and max_length limit
MAX_INPUT = 3000
#: option text (75) and value (150) limits; checkboxes hold at most 10 options
MAX_OPTION_TEXT = 75
MAX_CHECKBOXES = 10


# -- untrusted text in mrkdwn ---------------------------------------------------------------


def escape(text: str) -> str:
    """Escape Slack's three control characters (`&` first), which neutralises `<...>` syntax."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cut(escaped: str, limit: int) -> str:
    """Cut already-escaped text to `limit` characters without splitting an `&...;` entity."""
    if len(escaped) <= limit:
        return escaped
    head = escaped[: limit - 1]
    amp = head.rfind("&")
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    return head + "…"


def inline(value: Any, limit: int = MAX_INLINE) -> str:
    """An untrusted value as one line of inline code: no formatting, mentions or links."""
    if value is None or value == "":
        return "—"
    text = " ".join(clean(value).split())
    # A backtick would end the inline code and let mrkdwn formatting back in.
    text = escape(text.replace("`", "ˋ"))
    return f"`{cut(text, limit - 2)}`"


def plain(value: Any, limit: int) -> str:
    """An untrusted value for a plain_text object: cleaned, escaped, cut."""
    return cut(escape(" ".join(clean(value).split())), limit)


def args_block_text(args: dict[str, Any], url: str) -> str:
    """The arguments as a code block that fits one section, with a link when cut."""
    head, tail = "*Arguments*\n```\n", "\n```"
    more = f"\n_Cut to fit Slack: <{url}|view all in gate>_"
    # Escaping only lengthens text: what is past the section's length is never shown, so it
    # is not escaped either.
    body = untrusted.to_json(args, indent=2)[:MAX_SECTION_TEXT]
    # Backticks become a look-alike so "```" inside an argument cannot close the block.
    body = escape(body.replace("`", "ˋ"))
    if len(head) + len(body) + len(tail) <= MAX_SECTION_TEXT:
        return head + body + tail
    return head + cut(body, MAX_SECTION_TEXT - len(head) - len(tail) - len(more)) + tail + more


# -- the card -------------------------------------------------------------------------------

_TITLES = {
    "pending": "Approval needed",
    "approved": "Approved",
    "rejected": "Rejected",
    "expired": "Expired",
    "cancelled": "Cancelled",
}


def _when(view_time: Any) -> str:
    return f"{view_time:%Y-%m-%d %H:%M} UTC" if view_time else "—"


def _mrkdwn(text: str) -> dict[str, Any]:
    # verbatim: no auto-linking of URLs or channel names in what we send.
    return {"type": "mrkdwn", "text": text, "verbatim": True}


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": False}


def fallback_text(view: RequestView) -> str:
    """The notification / screen-reader line Slack shows outside the blocks."""
    title = _TITLES.get(view.status, view.status)
    summary = f": {plain(view.summary, 300)}" if view.summary else ""
    return cut(f"{title}: {plain(view.tool_name, MAX_INLINE)}{summary}", MAX_FALLBACK_TEXT)


def render_card(view: RequestView, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """The Block Kit blocks for a request: the question while pending, the outcome after.

    `now` (default: the current time) is when the countdown is counted from.
    """
    # block_ids must change with each update (a select keeps its choice otherwise)
    iteration = f"{view.status}-{len(view.votes)}-{int(view.expires_at.timestamp())}"
    title = _TITLES.get(view.status, view.status)
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": _plain(cut(f"{title}: {plain(view.tool_name, MAX_HEADER_TEXT)}", 150)),
        }
    ]
    if view.summary:
        blocks.append({"type": "section", "text": _plain(plain(view.summary, MAX_SECTION_TEXT))})
    fields = [
        f"*Tool*\n{inline(view.tool_name)}",
        f"*Rule*\n{inline(view.rule)}",
        f"*Agent*\n{inline(view.agent_id)}",
        f"*User*\n{inline(view.user_id)}",
        f"*Deadline*\n{_deadline(view, now or utcnow())}",
        f"*Approvals*\n{_approvals(view)}",
    ]
    blocks.append(
        {
            "type": "section",
            "block_id": f"facts-{iteration}",
            "fields": [_mrkdwn(cut(f, MAX_FIELD_TEXT)) for f in fields],
        }
    )
    blocks.append(
        {
            "type": "section",
            "block_id": f"args-{iteration}",
            "text": _mrkdwn(args_block_text(view.tool_args, view.url)),
        }
    )
    if view.status == "pending":
        blocks.append(_buttons(view, iteration))
    else:
        blocks.append(
            {
                "type": "section",
                "block_id": f"outcome-{iteration}",
                "text": _mrkdwn(_outcome(view)),
            }
        )
    blocks.append(
        {
            "type": "context",
            "elements": [_mrkdwn(f"Request {inline(view.id, 70)} · <{view.url}|Open in gate>")],
        }
    )
    return blocks


def _deadline(view: RequestView, now: datetime) -> str:
    if view.status != "pending":
        return _when(view.expires_at)
    # Slack shows <!date^...> in the reader's time zone; safe here because we build it.
    ts = int(view.expires_at.timestamp())
    local = f"<!date^{ts}^{{date_short_pretty}} {{time}}|{_when(view.expires_at)}>"
    return f"{local} ({decisions.countdown(view.expires_at, now)})"


def _approvals(view: RequestView) -> str:
    names = ", ".join(escape(v.approver) for v in view.approvals)
    count = f"{len(view.approvals)} of {view.approvals_required}"
    return cut(f"{count} approval{'s' if view.approvals_required > 1 else ''}", 100) + (
        f" ({cut(names, 500)})" if names else ""
    )


def _outcome(view: RequestView) -> str:
    sentence = view.outcome_sentence()
    changed = decisions.changes(view)
    if changed:
        sentence = sentence.replace("Approved by", "Approved with edits by", 1)
    text = f"*{escape(clean(sentence))}*"
    if view.decided_at:
        text += f" at {_when(view.decided_at)}"
    for key, before, after in changed:
        text += f"\n*Changed:* {inline(key, 80)} {inline(before, 300)} → {inline(after, 300)}"
    rejecting = [v for v in view.votes if v.verdict == "reject" and v.comment]
    if view.status == "rejected" and rejecting:
        text += f"\n*Reason:* {inline(rejecting[-1].comment, MAX_REASON)}"
    return cut(text, MAX_SECTION_TEXT)


def _button(action_id: str, label: str, value: str, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": action_id,
        "text": _plain(label),
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def _buttons(view: RequestView, iteration: str) -> dict[str, Any]:
    approve = _button(APPROVE_ACTION, "Approve", view.id, "primary")
    approve["confirm"] = {
        "title": _plain("Approve this call?"),
        "text": _plain("The agent's tool call will run as shown."),
        "confirm": _plain("Approve"),
        "deny": _plain("Cancel"),
    }
    elements = [approve]
    grants = decisions.grant_choices(view)
    if grants:
        elements.append(_grant_select(view.id, grants))
    if editable(view):
        elements.append(_button(EDIT_ACTION, "Edit & approve…", view.id))
    elements.append(_button(REJECT_ACTION, "Reject…", view.id, "danger"))
    elements.append(_button(EXTEND_ACTION, decisions.EXTEND_LABEL, view.id))
    return {"type": "actions", "block_id": f"decide-{iteration}", "elements": elements}


def _grant_select(request_id: str, grants: list[decisions.GrantChoice]) -> dict[str, Any]:
    # The option value carries the request id: a select's payload has no other place for it.
    options = [
        {
            "text": _plain(cut(g.label, MAX_OPTION_TEXT)),
            "value": f"{request_id}|{g.scope}:{g.duration}",
        }
        for g in grants
    ]
    return {
        "type": "static_select",
        "action_id": GRANT_ACTION,
        "placeholder": _plain("Approve for a while…"),
        "options": options,
        "confirm": {
            "title": _plain("Approve and grant?"),
            "text": _plain(
                "This call runs, and matching calls are allowed without asking until the "
                "grant ends (revocable in gate)."
            ),
            "confirm": _plain("Approve"),
            "deny": _plain("Cancel"),
        },
    }


def editable(view: RequestView) -> list[decisions.EditField]:
    """The arguments the edit modal offers (secrets and over-long values left out)."""
    return decisions.editable_fields(view, max_chars=MAX_INPUT)


def _meta(request_id: str, channel_id: str | None, message_ts: str | None) -> str:
    return json.dumps({"request_id": request_id, "channel_id": channel_id, "ts": message_ts})


def reason_modal(
    request_id: str,
    channel_id: str | None,
    message_ts: str | None,
    reasons: list[str] | None = None,
) -> dict[str, Any]:
    """The modal that asks why a request is rejected; the reason is what the model is told.

    With the rule's preset `reasons`, they are offered as options and the text is optional.
    """
    blocks: list[dict[str, Any]] = []
    if reasons:
        options = [
            {"text": _plain(cut(plain(r, MAX_OPTION_TEXT), MAX_OPTION_TEXT)), "value": f"r{i}"}
            for i, r in enumerate(reasons[:100])
        ]
        element: dict[str, Any] = (
            {"type": "checkboxes", "action_id": REASONS_INPUT, "options": options}
            if len(options) <= MAX_CHECKBOXES
            else {
                "type": "multi_static_select",
                "action_id": REASONS_INPUT,
                "placeholder": _plain("Pick reasons"),
                "options": options,
            }
        )
        blocks.append(
            {
                "type": "input",
                "block_id": REASONS_BLOCK,
                "optional": True,
                "label": _plain("Reasons"),
                "element": element,
            }
        )
    blocks.append(
        {
            "type": "input",
            "block_id": REASON_BLOCK,
            "optional": bool(reasons),
            "label": _plain(
                "Anything to add? The agent is told this."
                if reasons
                else "Why? The agent is told this."
            ),
            "element": {
                "type": "plain_text_input",
                "action_id": REASON_INPUT,
                "multiline": True,
                "max_length": MAX_REASON,
            },
        }
    )
    return {
        "type": "modal",
        "callback_id": REJECT_CALLBACK,
        "private_metadata": _meta(request_id, channel_id, message_ts),
        "title": _plain("Reject request"),
        "submit": _plain("Reject"),
        "close": _plain("Cancel"),
        "blocks": blocks,
    }


def edit_block_id(index: int) -> str:
    """The input block of the `index`th editable field."""
    return f"edit_{index}"


def edit_modal(
    view: RequestView,
    fields: list[decisions.EditField],
    channel_id: str | None,
    message_ts: str | None,
) -> dict[str, Any]:
    """The "Edit & approve" modal: one plain-text box per editable argument, prefilled."""
    left_out = len(view.tool_args) - len(fields)
    note = (
        'Values are JSON (500, "text", [1, 2]); plain words are taken as text. '
        "Approving runs the call with these values."
    )
    if left_out:
        note += f" {left_out} other argument(s) keep their values (edit them in gate)."
    blocks: list[dict[str, Any]] = [{"type": "section", "text": _plain(note)}]
    for i, field in enumerate(fields):
        blocks.append(
            {
                "type": "input",
                "block_id": edit_block_id(i),
                "label": _plain(plain(field.key, 150) or "(empty key)"),
                "element": {
                    "type": "plain_text_input",
                    "action_id": EDIT_INPUT,
                    "multiline": len(field.text) > 60 or "\n" in field.text,
                    "initial_value": field.text,
                    "max_length": MAX_INPUT,
                },
            }
        )
    blocks.append(
        {
            "type": "input",
            "block_id": COMMENT_BLOCK,
            "optional": True,
            "label": _plain("Note for the agent (optional)"),
            "element": {
                "type": "plain_text_input",
                "action_id": COMMENT_INPUT,
                "multiline": True,
                "max_length": MAX_REASON,
            },
        }
    )
    return {
        "type": "modal",
        "callback_id": EDIT_CALLBACK,
        "private_metadata": _meta(view.id, channel_id, message_ts),
        "title": _plain("Edit & approve"),
        "submit": _plain("Approve"),
        "close": _plain("Cancel"),
        "blocks": blocks,
    }
