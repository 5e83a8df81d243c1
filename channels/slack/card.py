"""The Block Kit approval card: a pure function of a request's view.

The card leads with the call as gate renders it (`gate.rendering`, never the agent's
summary, which comes after it as the agent's claim) and shows the question while the request
is pending (with what its rule offers: a grant
select, "Edit & approve", preset reasons in the reject modal) and the outcome after. Text
from the request is untrusted and goes through `channels.slack.mrkdwn`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from channels import decisions, edits
from channels.slack.modals import editable
from channels.slack.mrkdwn import (
    ARGS_CHARS,
    MAX_CONTEXT_TEXT,
    MAX_FALLBACK_TEXT,
    MAX_FIELD_TEXT,
    MAX_HEADER_TEXT,
    MAX_OPTION_TEXT,
    MAX_REASON,
    MAX_SECTION_TEXT,
    args_room,
    args_sections,
    code_text,
    cut,
    escape,
    inline,
    mrkdwn_object,
    plain,
    plain_object,
)
from gate.base.statuses import utcnow
from gate.decisions.readmodel import RequestView
from gate.text.untrusted import clean

APPROVE_ACTION = "gate_approve"
REJECT_ACTION = "gate_reject"
GRANT_ACTION = "gate_grant"
EDIT_ACTION = "gate_edit"
EXTEND_ACTION = "gate_extend"
ACKNOWLEDGE_ACTION = "gate_acknowledge"


def card_message(req: RequestView) -> tuple[str, list[dict[str, Any]]]:
    """The card's fallback text and blocks. Channels call it in a worker thread: rendering
    scans untrusted text, and a huge argument must not hold up the event loop."""
    return fallback_text(req), render_card(req)


def fallback_text(view: RequestView) -> str:
    """The notification / screen-reader line Slack shows outside the blocks: gate's headline
    of the call, never the agent's summary."""
    title = decisions.TITLES.get(view.status, view.status)
    line = plain(decisions.headline(view), MAX_HEADER_TEXT)
    return cut(f"{title}: {line}", MAX_FALLBACK_TEXT)


def render_card(view: RequestView, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """The Block Kit blocks for a request: gate's headline, the call as gate renders it (and
    what made the rule ask), the agent's summary below it as the agent's claim, the facts,
    then the question while pending, the outcome after.

    `now` (default: the current time) is when the countdown is counted from.
    """
    # block_ids must change with each update (a select keeps its choice otherwise)
    iteration = f"{view.status}-{len(view.votes)}-{int(view.expires_at.timestamp())}"
    title = decisions.TITLES.get(view.status, view.status)
    shown = decisions.arguments(view, ARGS_CHARS, link=False)
    if shown.cut:  # one section holds it, escaped: cut shorter, the words of the cut whole
        room = args_room(shown, view.url)
        shown = decisions.arguments_within(
            view, ARGS_CHARS, room, lambda text: len(code_text(text)), link=False
        )
    headline = plain(decisions.headline(view, shown), MAX_HEADER_TEXT)
    header = cut(f"{title}: {headline}", MAX_HEADER_TEXT)
    blocks: list[dict[str, Any]] = [{"type": "header", "text": plain_object(header)}]
    asked = decisions.why_asked(view)
    if asked:
        text = f":warning: *{escape(asked.heading)}*\n{inline(asked.words, MAX_REASON)}"
        blocks.append({"type": "section", "text": mrkdwn_object(text)})
    for i, text in enumerate(args_sections(shown, view.url)):
        block_id = f"args-{iteration}" + (f"-{i + 1}" if i else "")
        blocks.append({"type": "section", "block_id": block_id, "text": mrkdwn_object(text)})
    claim = decisions.claim(view)
    if claim is not None:
        # The agent's words: small, grey, after the call, labelled as what they are.
        label = mrkdwn_object(f"*{escape(decisions.CLAIM_LABEL)}:*")
        words = plain_object(plain(claim, MAX_CONTEXT_TEXT))
        blocks.append({"type": "context", "elements": [label, words]})
    blocks.append(_facts(view, iteration, now or utcnow()))
    if view.status == "pending":
        blocks.append(_buttons(view, iteration, approvable=shown.whole))
    else:
        outcome = mrkdwn_object(_outcome(view))
        blocks.append({"type": "section", "block_id": f"outcome-{iteration}", "text": outcome})
    link = f"Request {inline(view.id, 70)} · <{view.url}|Open in gate>"
    blocks.append({"type": "context", "elements": [mrkdwn_object(link)]})
    return blocks


def _facts(view: RequestView, iteration: str, now: datetime) -> dict[str, Any]:
    fields = [
        f"*Tool*\n{inline(view.tool_name)}",
        f"*Rule*\n{inline(decisions.rule_and_stage(view), decisions.STAGE_CHARS)}",
        f"*Agent*\n{inline(view.agent_id)}",
        f"*User*\n{inline(view.user_id)}",
        f"*Deadline*\n{_deadline(view, now)}",
        f"*Approvals*\n{_approvals(view)}",
    ]
    return {
        "type": "section",
        "block_id": f"facts-{iteration}",
        "fields": [mrkdwn_object(cut(f, MAX_FIELD_TEXT)) for f in fields],
    }


def _when(view_time: Any) -> str:
    return f"{view_time:%Y-%m-%d %H:%M} UTC" if view_time else "—"


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
    on_it = view.acknowledgement  # an approver said they are on it (gate.decisions.acknowledging)
    return (
        cut(f"{count} approval{'s' if view.approvals_required > 1 else ''}", 100)
        + (f" ({cut(names, 500)})" if names else "")
        + (f"\n{escape(clean(on_it, 300))}" if on_it else "")
    )


def _outcome(view: RequestView) -> str:
    sentence = view.outcome_sentence()
    changed = edits.changes(view)
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
        "text": plain_object(label),
        "value": value,
    }
    if style:
        button["style"] = style
    return button


def _confirm(title: str, text: str) -> dict[str, Any]:
    return {
        "title": plain_object(title),
        "text": plain_object(text),
        "confirm": plain_object("Approve"),
        "deny": plain_object("Cancel"),
    }


def _buttons(view: RequestView, iteration: str, *, approvable: bool) -> dict[str, Any]:
    """Approve (as asked, for a while, with edits) only when the card shows the whole call;
    Reject and Extend always; "I'm on it" until someone said so."""
    elements = []
    if approvable:
        approve = _button(APPROVE_ACTION, "Approve", view.id, "primary")
        text = "The agent's tool call will run as shown."
        elements.append(approve | {"confirm": _confirm("Approve this call?", text)})
        grants = decisions.grant_choices(view)
        if grants:
            elements.append(_grant_select(view.id, grants))
        if editable(view):
            elements.append(_button(EDIT_ACTION, "Edit & approve…", view.id))
    elements.append(_button(REJECT_ACTION, "Reject…", view.id, "danger"))
    # the deadline rides along, so a click delivered twice extends once (on any replica)
    shown = f"{view.id}|{view.expires_at.isoformat()}"
    elements.append(_button(EXTEND_ACTION, decisions.EXTEND_LABEL, shown))
    if view.acknowledged_by is None:  # "I'm on it": reminders and escalation stop
        elements.append(_button(ACKNOWLEDGE_ACTION, decisions.ACKNOWLEDGE_LABEL, view.id))
    return {"type": "actions", "block_id": f"decide-{iteration}", "elements": elements}


def _grant_select(request_id: str, grants: list[decisions.GrantChoice]) -> dict[str, Any]:
    # The option value carries the request id: a select's payload has no other place for it.
    options = [
        {
            "text": plain_object(cut(g.label, MAX_OPTION_TEXT)),
            "value": f"{request_id}|{g.scope}:{g.duration}",
        }
        for g in grants
    ]
    return {
        "type": "static_select",
        "action_id": GRANT_ACTION,
        "placeholder": plain_object("Approve for a while…"),
        "options": options,
        "confirm": _confirm(
            "Approve and grant?",
            "This call runs, and matching calls are allowed without asking until the "
            "grant ends (revocable in gate).",
        ),
    }
