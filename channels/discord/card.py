"""The Discord approval card: a message (content, one embed, components), a pure function of a
request's view.

The card leads with the call as gate renders it (gate's headline, then the call; the agent's
summary after it, as the agent's claim) and shows the question while the request is pending,
with what its rule offers (preset reject reasons and grants as selects, "Edit & approve…",
"Extend +15m"), and the outcome after, with only the link to gate left. Untrusted text goes
through `channels.discord.markdown`; every message says `allowed_mentions: {"parse": []}`, so
nothing in it can ping anyone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from channels import decisions, edits
from channels.discord import ids
from channels.discord.markdown import (
    MAX_BUTTON_LABEL,
    MAX_EMBED_TOTAL,
    MAX_FIELD_VALUE,
    MAX_INPUT,
    MAX_OPTION_TEXT,
    MAX_OPTIONS,
    MAX_REASON,
    code_block,
    cut,
    escape,
    inline,
    plain,
)
from gate.base.statuses import utcnow
from gate.decisions.readmodel import RequestView
from gate.text.untrusted import clean

#: nothing in a card may ping: not users, roles, @everyone or @here
NO_MENTIONS: dict[str, Any] = {"parse": []}
ACTION_ROW, BUTTON, STRING_SELECT = 1, 2, 3
PRIMARY, SECONDARY, SUCCESS, DANGER, LINK = 1, 2, 3, 4, 5
#: characters of the call's rendering a card shows whole (and so may offer to approve); a
#: cut one starts at this size and halves until the embed fits 6,000
ARGS_CHARS = 3000
#: the agent's summary is a line or two; the call is what is approved
SUMMARY_CHARS = 500
#: what failed in a rule's condition, as gate words it
CONDITION_CHARS = 200
#: a modal holds five rows: four arguments and the note to the agent
MAX_EDIT_FIELDS = 4

COLOURS = {
    "pending": 0xF0B232,
    "approved": 0x23A55A,
    "rejected": 0xDA373C,
    "expired": 0x80848E,
    "cancelled": 0x80848E,
}


def card_message(view: RequestView, *, now: datetime | None = None) -> dict[str, Any]:
    """The message for a request: the body of a create, an edit or an UPDATE_MESSAGE answer.

    Channels call it in a worker thread: rendering scans untrusted text, and a huge argument
    must not hold up the event loop. `now` is what the countdown counts from.
    """
    now = now or utcnow()
    shown = decisions.arguments(view, ARGS_CHARS, link=False)
    args_chars = ARGS_CHARS
    embed = _embed(view, now, shown)
    # A whole call stays whole while the card offers to approve it (with every other part
    # at its longest a pending embed still fits). A cut one is cut shorter, and so is a whole
    # one once the request is final: the outcome, changes and reason come on top, and an
    # embed Discord refuses would leave the card pending, its outcome never shown.
    approving = shown.whole and view.status == "pending"
    while embed_size(embed) > MAX_EMBED_TOTAL and not approving and args_chars > 200:
        args_chars //= 2
        embed = _embed(view, now, decisions.arguments(view, args_chars, link=False))
    title = decisions.TITLES.get(view.status, view.status)
    headline = inline(decisions.headline(view, shown), 300)
    return {
        "content": cut(f"**{title}**: {headline}", 2000),
        "embeds": [embed],
        "components": components(view),
        "allowed_mentions": NO_MENTIONS,
    }


def embed_size(embed: dict[str, Any]) -> int:
    """Characters Discord counts towards an embed's 6,000."""
    total = len(embed.get("title", "")) + len(embed.get("description", ""))
    total += len(embed.get("footer", {}).get("text", ""))
    return total + sum(len(f["name"]) + len(f["value"]) for f in embed.get("fields", []))


def _embed(view: RequestView, now: datetime, shown: decisions.Arguments) -> dict[str, Any]:
    # The call as gate renders it is the description; the fences come on top of its text,
    # which is never cut here (a cut call already ends saying what is not shown).
    fences = len(code_block("", 100)[0])
    parts = [f"**The call**\n{code_block(shown.text, len(shown.text) + fences)[0]}"]
    if not shown.whole:
        parts.append(f"*{escape(shown.note('Discord'))} Use Open in gate.*")
    embed = {
        "title": decisions.TITLES.get(view.status, view.status),
        "color": COLOURS.get(view.status, COLOURS["expired"]),
        "description": "\n".join(parts),
        "fields": [*_about(view), *_fields(view, now)],
        "footer": {"text": f"Request {view.id}"},
    }
    if view.url:  # gate's own page: the title is its link (so is the "Open in gate" button)
        embed["url"] = view.url
    return embed


def _about(view: RequestView) -> list[dict[str, Any]]:
    """What made the rule ask (a failed condition, the arguments it reads), then the agent's
    summary, labelled as the agent's claim: after the call, never in its place."""
    fields = []
    asked = decisions.why_asked(view)
    if asked:
        words = f"{escape(asked.heading)}\n{inline(asked.words, CONDITION_CHARS)}"
        fields.append(_field(asked.title, words, inline_field=False))
    claim = decisions.claim(view)
    if claim is not None:
        said = code_block(claim, SUMMARY_CHARS)[0]
        fields.append(_field(decisions.CLAIM_LABEL, said, inline_field=False))
    return fields


def _field(name: str, value: str, *, inline_field: bool = True) -> dict[str, Any]:
    return {"name": name, "value": cut(value, MAX_FIELD_VALUE), "inline": inline_field}


def _fields(view: RequestView, now: datetime) -> list[dict[str, Any]]:
    fields = [
        _field("Tool", inline(view.tool_name, 100)),
        _field("Agent", inline(view.agent_id)),
        _field("User", inline(view.user_id)),
        _field("Rule", inline(decisions.rule_and_stage(view), decisions.STAGE_CHARS)),
        _field("Deadline", _deadline(view, now)),
        _field("Approvals", _approvals(view)),
    ]
    if view.status != "pending":
        fields.extend(_outcome(view))
    return fields


def _deadline(view: RequestView, now: datetime) -> str:
    # <t:...> is Discord's own timestamp markup, shown in each reader's time zone; gate
    # builds it from a number, so it is safe here.
    ts = int(view.expires_at.timestamp())
    if view.status != "pending":
        return f"<t:{ts}:f>"
    return f"<t:{ts}:f> ({decisions.countdown(view.expires_at, now)}, then {view.on_timeout})"


def _approvals(view: RequestView) -> str:
    count = f"{len(view.approvals)} of {view.approvals_required}"
    names = ", ".join(inline(v.approver, 60) for v in view.approvals[:10])
    said = f"{count} ({names})" if names else count
    on_it = view.acknowledgement  # an approver said they are on it (gate.decisions.acknowledging)
    return f"{said}\n{escape(clean(on_it, 300))}" if on_it else said


def _outcome(view: RequestView) -> list[dict[str, Any]]:
    sentence = view.outcome_sentence()
    changed = edits.changes(view)
    if changed:
        sentence = sentence.replace("Approved by", "Approved with edits by", 1)
    if view.decided_at:
        sentence += f" at {view.decided_at:%Y-%m-%d %H:%M} UTC"
    fields = [_field("Outcome", escape(clean(sentence)), inline_field=False)]
    for key, before, after in changed[:5]:
        change = f"{inline(key, 80)} {inline(before, 300)} → {inline(after, 300)}"
        fields.append(_field("Changed", change, inline_field=False))
    rejecting = [v for v in view.votes if v.verdict == "reject" and v.comment]
    if view.status == "rejected" and rejecting:
        reason = code_block(clean(rejecting[-1].comment), MAX_FIELD_VALUE)[0]
        fields.append(_field("Reason", reason, inline_field=False))
    return fields


# -- components -------------------------------------------------------------------------------


def _button(style: int, label: str, custom_id: str) -> dict[str, Any]:
    return {
        "type": BUTTON,
        "style": style,
        "label": cut(label, MAX_BUTTON_LABEL),
        "custom_id": custom_id,
    }


def _row(*items: dict[str, Any]) -> dict[str, Any]:
    return {"type": ACTION_ROW, "components": list(items)}


def link_button(url: str) -> dict[str, Any]:
    """The "Open in gate" link button (a link button sends no interaction)."""
    return {"type": BUTTON, "style": LINK, "label": "Open in gate", "url": url}


def components(view: RequestView) -> list[dict[str, Any]]:
    """The card's action rows: the decision while pending, then only the link to gate."""
    if view.status != "pending":
        return [_row(link_button(view.url))] if view.url else []
    # Approving (as asked, with edits, for a while) only on a card that shows the whole call.
    approvable = decisions.approvable(view, ARGS_CHARS)
    buttons = [_button(SUCCESS, "Approve", ids.build("approve", view.id))] if approvable else []
    buttons.append(_button(DANGER, "Reject…", ids.build("reject", view.id)))
    if approvable and editable(view):
        buttons.append(_button(SECONDARY, "Edit & approve…", ids.build("edit", view.id)))
    # the deadline rides along, so a click delivered twice extends once (on any replica)
    extend = ids.build("extend", view.id, ids.deadline_token(view.expires_at))
    buttons.append(_button(SECONDARY, decisions.EXTEND_LABEL, extend))
    if view.url:
        buttons.append(link_button(view.url))
    rows = [_row(*buttons)]
    reasons = decisions.reject_reasons(view)[:MAX_OPTIONS]
    if reasons:
        options = [(plain(r, MAX_OPTION_TEXT) or "(empty)", f"r{i}") for i, r in enumerate(reasons)]
        rows.append(_select("reasons", view.id, "Reject with a preset reason…", options, many=True))
    grants = decisions.grant_choices(view)[:MAX_OPTIONS] if approvable else []
    if grants:
        options = [(cut(g.label, MAX_OPTION_TEXT), f"{g.scope}:{g.duration}") for g in grants]
        rows.append(_select("grant", view.id, "Approve for a while…", options, many=False))
    if view.acknowledged_by is None:  # "I'm on it", in a row of its own (five buttons a row)
        ack = ids.build("acknowledge", view.id)
        rows.append(_row(_button(SECONDARY, decisions.ACKNOWLEDGE_LABEL, ack)))
    return rows


def _select(
    verb: str, request_id: str, placeholder: str, options: list[tuple[str, str]], *, many: bool
) -> dict[str, Any]:
    select = {
        "type": STRING_SELECT,
        "custom_id": ids.build(verb, request_id),
        "placeholder": placeholder,
        "options": [{"label": label, "value": value} for label, value in options],
        "min_values": 1,
        "max_values": len(options) if many else 1,
    }
    return _row(select)


def editable(view: RequestView) -> list[edits.EditField]:
    """The arguments the edit modal offers (secrets and over-long values left out)."""
    return edits.editable_fields(view, max_chars=MAX_INPUT)[:MAX_EDIT_FIELDS]


__all__ = ["MAX_REASON", "NO_MENTIONS", "card_message", "components", "editable"]
