"""The Telegram approval card: HTML text and an inline keyboard, pure functions of a view.

Telegram's HTML parse mode reads only a few tags, but plain text is not inert: clients turn
`@name` into a mention, `https://...` or `evil.example` into a link, `/command` into a
tappable command and `#tag` into a search. So untrusted text (tool names and arguments,
summaries, agent and user ids, reasons, comments) goes only inside `<code>` or `<pre>`,
where nothing is detected, after `gate.text.untrusted` has cleaned it and `&<>` are escaped, so
it cannot close the tag. Plain text on the card is gate's own words. The one link is gate's
own page. Buttons carry sealed data (`channels.telegram.tokens`), never the request id.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from channels import decisions, edits
from channels.telegram.tokens import Button, Sealer
from gate.base.statuses import utcnow
from gate.decisions.readmodel import RequestView
from gate.text import untrusted

#: Telegram's limit on a message's text, after entities are parsed (UTF-16 code units)
TEXT_LIMIT = 4096
#: the card stays under the limit with room for the parts that are not cut
CARD_TARGET = 3900
#: characters of the call's rendering a card shows whole (and so may offer to approve): with
#: every other part at its smallest, the card still fits if each of them takes two UTF-16 units
ARGS_CHARS = 1000
TEXT_CHARS = 300
NAME_CHARS = 100
VOTES_SHOWN = 10
#: a keyboard read on a phone: more presets than this are picked in gate
REASONS_SHOWN = 6
BUTTON_CHARS = 60
APPROVE = "Approve"
REJECT = "Reject…"
EDIT = "Edit & approve…"
REASON_PREFIX = "Reject: "


@dataclass(frozen=True)
class Card:
    """A card as sendMessage / editMessageText take it."""

    text: str
    keyboard: list[list[dict[str, str]]]

    def reply_markup(self) -> dict[str, Any]:
        """The inline keyboard (empty once the request is final: the buttons go away)."""
        return {"inline_keyboard": self.keyboard}


def escape(text: str) -> str:
    """Text safe between HTML tags in Telegram's parse mode: `&`, `<` and `>` escaped."""
    return html.escape(text, quote=False)


def code(text: object, limit: int = NAME_CHARS) -> str:
    """Untrusted text, cleaned, on one line and cut, inert inside `<code>` ("-" when there is
    none). One line: a line break in an agent's id would draw lines of the card's own (a fake
    "Arguments:" block, blank lines pushing the real ones away)."""
    cleaned = cut(" ".join(untrusted.clean(text).split()), limit) if text else ""
    return f"<code>{escape(cleaned)}</code>" if cleaned else "-"


def pre(text: str) -> str:
    """A block of text (already cleaned) inert inside `<pre>`."""
    return f"<pre>{escape(text)}</pre>"


def cut(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cut_units(text: str, limit: int) -> str:
    """`text` cut to `limit` UTF-16 code units (what Telegram counts; an emoji is two), with an
    ellipsis when cut."""
    if len(text) <= limit // 2 or utf16_length(text) <= limit:
        return text
    used = 0
    for index, char in enumerate(text):
        used += 2 if ord(char) > 0xFFFF else 1
        if used > limit - 1:
            return text[:index] + "…"
    return text


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units, as Telegram counts a message's text."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


_TAG = untrusted.compile(r"<[^>]*>")


def visible_length(text: str) -> int:
    """What Telegram counts against TEXT_LIMIT: the text without tags, in UTF-16 units."""
    return utf16_length(html.unescape(_TAG.sub(lambda _: "", text)))


@dataclass(frozen=True)
class Sizes:
    """How much of each untrusted part a card shows."""

    #: characters of the call's rendering (a cut one; a whole one is never cut)
    args: int = ARGS_CHARS
    #: characters of the summary and of the reason
    text: int = TEXT_CHARS
    #: votes and changed arguments listed
    items: int = VOTES_SHOWN
    #: characters of a vote's comment or a changed value
    item: int = 200


#: tried in turn until the card fits: the arguments give way first, then everything else
#: (the last one fits whatever the request holds: about 2,000 characters at most)
SIZES = (
    Sizes(),
    Sizes(args=750),
    Sizes(args=300),
    Sizes(args=300, text=150, items=5, item=60),
    Sizes(args=100, text=80, items=2, item=30),
)


def render(view: RequestView, sealer: Sealer, *, now: datetime | None = None) -> Card:
    """The card for a request in its current state (buttons only while it is pending).

    A call whose rendering fits `ARGS_CHARS` is shown whole at every size (the other parts
    give way); only then does the card offer to approve it.
    """
    now = now or utcnow()
    shown = decisions.arguments(view, ARGS_CHARS, link=False)
    for sizes in SIZES:
        text = _text(view, sealer, sizes, now, shown)
        if visible_length(text) <= CARD_TARGET:
            break
    return Card(text, keyboard(view, sealer, approvable=shown.whole))


def _text(
    view: RequestView, sealer: Sealer, sizes: Sizes, now: datetime, shown: decisions.Arguments
) -> str:
    title = decisions.TITLES.get(view.status, view.status.title())
    headline = code(decisions.headline(view, shown), min(sizes.text, 200))
    lines = [f"<b>{title}:</b> {headline}"]
    asked = decisions.why_asked(view)
    if asked:
        lines.append(f"<b>{escape(asked.heading)}</b> {code(asked.words, sizes.text)}")
    lines += _arguments(view, shown, sizes.args)
    claim = decisions.claim(view)
    if claim is not None:  # the agent's words: after the call, labelled as the agent's
        lines.append(f"{escape(decisions.CLAIM_LABEL)}:")
        lines.append(pre(cut(claim, sizes.text)))
    lines += [
        f"Agent: {code(view.agent_id)}",
        f"User: {code(view.user_id)}",
        f"Rule: {code(decisions.rule_and_stage(view), _rule_chars(view, sizes))}",
    ]
    if view.status == "pending":
        left = decisions.countdown(view.expires_at, now)
        lines.append(
            f"Deadline: {view.expires_at:%Y-%m-%d %H:%M} UTC, {left} (then {view.on_timeout})"
        )
    else:
        lines.append(f"Asked: {view.created_at:%Y-%m-%d %H:%M} UTC")
    lines.append(f"Request: {code(view.id)}")
    lines += _history(view, sizes)
    if view.status == "pending":
        lines += _offers(view, sealer, approvable=shown.whole)
    lines.append(f'<a href="{html.escape(view.url, quote=True)}">Open in gate</a>')
    return "\n".join(lines)


def _rule_chars(view: RequestView, sizes: Sizes) -> int:
    """Room for the rule line: a name, or in a chain the stages too (which give way, as the
    other parts do, when the card must shrink to keep the call whole)."""
    return (
        min(decisions.STAGE_CHARS, max(sizes.text, NAME_CHARS)) if view.stage_label else NAME_CHARS
    )


def _arguments(view: RequestView, shown: decisions.Arguments, args_chars: int) -> list[str]:
    """The call as gate renders it, one `<pre>` block, secrets masked: whole, or cut to
    `args_chars` ending with what is not shown, then why the card offers no approval."""
    if shown.whole:
        return ["The call:", pre(shown.text)]
    shown = decisions.recut(view, shown, args_chars, ARGS_CHARS)  # a smaller card: cut shorter
    return ["The call:", pre(shown.text), escape(shown.note("Telegram"))]


def _history(view: RequestView, sizes: Sizes) -> list[str]:
    """Where the request stands, its reason once final, the changes, and the votes so far."""
    outcome = view.outcome_sentence()
    changes = edits.changes(view)
    if changes:
        outcome = outcome.replace("Approved by", "Approved with edits by", 1)
    lines = [f"<b>{escape(outcome)}</b>"]
    if view.reason and view.status != "pending":
        lines += ["Reason:", pre(cut(untrusted.clean(view.reason), sizes.text))]
    for key, before, after in changes[: sizes.items]:
        changed = f"{code(before, sizes.item)} to {code(after, sizes.item)}"
        lines.append(f"Changed {code(key, 40)}: {changed}")
    for vote in view.votes[: sizes.items]:
        word = "approved" if vote.verdict == "approve" else "rejected"
        line = f"{code(vote.approver)} {word} via {escape(vote.via)}"
        lines.append(f"{line}: {code(vote.comment, sizes.item)}" if vote.comment else line)
    hidden = max(0, len(changes) - sizes.items) + max(0, len(view.votes) - sizes.items)
    if hidden:
        lines.append(f"And {hidden} more changes or votes: open the request in gate.")
    return lines


def _offers(view: RequestView, sealer: Sealer, *, approvable: bool) -> list[str]:
    """What the rule offers beyond the buttons' words, and how to decide by typing."""
    lines = []
    if decisions.reject_reasons(view):
        lines.append("Reject with a preset reason below, or press Reject… to write one.")
    if approvable and decisions.grant_choices(view):
        lines.append("Approve for a while: the grant buttons allow the same call again.")
    if approvable and editable(view):
        lines.append(escape(f"{EDIT} asks for new values as a reply."))
    lines.append(escape(f"{decisions.EXTEND_LABEL} moves the deadline."))
    request_code = sealer.code(view.id)
    reject = f"<code>/reject {request_code} your reason</code>"
    if approvable:
        lines.append(f"Or type <code>/approve {request_code}</code> or {reject}")
    else:
        lines.append(f"Or type {reject}")
    return lines


def editable(view: RequestView) -> list[edits.EditField]:
    """The arguments a reply may change: secrets, values over a reply's size and names a
    `name = value` line cannot carry (`edits.named_by_a_line`) left out."""
    fields = edits.editable_fields(view, max_chars=1000)
    return [field for field in fields if edits.named_by_a_line(field)]


def keyboard(view: RequestView, sealer: Sealer, *, approvable: bool) -> list[list[dict[str, str]]]:
    """The inline keyboard while pending: decide, presets, grants, edit, extend and "I'm on
    it" (approve, grants and edit only on a card that shows the whole call: `approvable`)."""
    if view.status != "pending":
        return []

    def button(label: str, pressed: Button) -> dict[str, str]:
        return {"text": cut(label, BUTTON_CHARS), "callback_data": sealer.seal(pressed)}

    approve, reject = Button(view.id, "approve"), Button(view.id, "reject")
    first = [button(APPROVE, approve)] if approvable else []
    rows = [[*first, button(REJECT, reject)]]
    for index, reason in enumerate(decisions.reject_reasons(view)[:REASONS_SHOWN]):
        label = REASON_PREFIX + untrusted.clean(reason)
        rows.append([button(label, Button(view.id, "reason", reason=index))])
    for choice in decisions.grant_choices(view) if approvable else []:
        seconds = int(choice.duration.removesuffix("s"))
        rows.append([button(choice.label, Button(view.id, "grant", grant=(choice.scope, seconds)))])
    last = [button(EDIT, Button(view.id, "edit"))] if approvable and editable(view) else []
    last.append(button(decisions.EXTEND_LABEL, Button(view.id, "extend", shown=view.expires_at)))
    if view.acknowledged_by is None:  # "I'm on it": reminders and escalation stop
        last.append(button(decisions.ACKNOWLEDGE_LABEL, Button(view.id, "acknowledge")))
    rows.append(last)
    return rows
