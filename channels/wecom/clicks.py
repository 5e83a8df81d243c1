"""What a WeCom callback asks for, read into gate's neutral `Click`.

Two kinds of callback act on a request:

* a `template_card_event`: a button on a request's card (Approve, with the grant picked in
  its dropdown; Reject…; Edit…; Extend), or the Reject button of a reasons form (the preset
  reasons ticked);
* a text message to the app: `reject <request id> <reason>` or `edit <request id>` followed
  by `name=value` lines. Template cards have no text inputs, so a reason or an edited value
  is typed in the approver's chat with the app; the message is signed and encrypted like a
  click, and it comes from the person WeCom says it does.

Everything here is parsing; whether the click may do it is gate's question.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from channels import decisions, edits
from channels.wecom import card
from channels.wecom.verify import Message
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import Click
from gate.text import untrusted

#: the longest reason kept from a typed message
MAX_COMMENT = 500
COMMANDS = ("reject", "edit")
HELP = (
    "To reject with a reason, reply: reject [request id] [reason]. "
    "To approve with changes, press Edit… on the card."
)


@dataclass(frozen=True)
class CardClick:
    """A press on one of gate's card buttons (or a reasons form's Reject)."""

    request_id: str
    user: str
    #: approve, reject, edit, extend or acknowledge
    verb: str
    #: the reasons form's submit (preset reasons ticked), not the card's Reject…
    form: bool = False
    reasons: tuple[str, ...] = ()
    grant: str | None = None
    extend_from: datetime | None = None


@dataclass(frozen=True)
class Command:
    """A typed `reject` or `edit` message."""

    request_id: str
    user: str
    verb: str
    #: the rest of the message: the reason, or the `name=value` lines
    text: str


def card_click(message: Message) -> CardClick | None:
    """The button pressed, or None when the card or key is not one gate made."""
    found = card.request_of(message.task_id)
    if found is None:
        return None
    kind, request_id = found
    key = message.event_key
    if kind == card.FORM_TASK:
        if key != "reject":
            return None
        picked = message.selected.get(card.REASONS_QUESTION, ())
        return CardClick(request_id, message.from_user, "reject", form=True, reasons=picked)
    if key in ("approve", "reject", "edit", "extend", "acknowledge"):
        grant = message.selected.get(card.GRANT_QUESTION, ())
        chosen = grant[0] if grant and grant[0] != card.JUST_THIS_CALL else None
        return CardClick(request_id, message.from_user, key, grant=chosen)
    verb, _, shown = key.partition("-")
    when = card.shown_deadline(shown) if verb == "extend" else None
    if when is None:
        return None
    return CardClick(request_id, message.from_user, "extend", extend_from=when)


def command(message: Message) -> Command | None:
    """A typed `reject <id> <reason>` / `edit <id> ...`; None for any other text."""
    head, _, rest = message.content.strip().partition("\n")
    words = head.split(maxsplit=2)
    if len(words) < 2 or words[0].lower() not in COMMANDS:
        return None
    verb, request_id = words[0].lower(), words[1]
    tail = words[2] if len(words) > 2 else ""
    text = f"{tail}\n{rest}".strip() if verb == "reject" else rest
    return Command(request_id, message.from_user, verb, text)


def approve_click(channel: str, pressed: CardClick) -> Click | str:
    """An Approve press, with the grant picked in the dropdown; a refusal text if unreadable."""
    try:
        grant = decisions.parse_grant(pressed.grant) if pressed.grant else None
    except ValueError as exc:
        return f"Not recorded: {exc}."
    return Click(channel, pressed.user, pressed.request_id, "approve", grant=grant)


def form_click(channel: str, pressed: CardClick, view: RequestView | None) -> Click | str:
    """The reasons form's Reject: the ticked presets as their text."""
    if view is None or view.is_final:
        return Click(channel, pressed.user, pressed.request_id, "reject")
    if not pressed.reasons:
        return "Tick at least one reason, or reply: " + reject_hint(pressed.request_id)
    try:
        picked = decisions.reasons_from(view, list(pressed.reasons))
    except ValueError as exc:
        return f"Not recorded: {exc}."
    return Click(channel, pressed.user, pressed.request_id, "reject", reasons=tuple(picked))


def reject_click(channel: str, typed: Command) -> Click | str:
    """`reject <id> <reason>`: the reason is what the agent is told, as typed."""
    reason = untrusted.strip_invisible(untrusted.cap(typed.text))[:MAX_COMMENT].strip()
    if not reason:
        return "Not recorded: say why after the request id: " + reject_hint(typed.request_id)
    return Click(channel, typed.user, typed.request_id, "reject", comment=reason)


def edit_click(channel: str, typed: Command, view: RequestView | None) -> Click | str:
    """`edit <id>` + `name=value` lines: approve with those arguments changed."""
    if view is None or view.is_final:
        return Click(channel, typed.user, typed.request_id, "approve")
    fields = card.editable(view)
    if not fields:
        return NOTHING_EDITABLE
    by_name = {f.key: f for f in fields}
    texts: dict[str, str] = {}
    for line in typed.text.splitlines():
        if not line.strip():
            continue
        name, eq, value = line.partition("=")
        name = name.strip()
        if not eq or name not in by_name:
            shown = card.clean(name, 40)
            return f"Not recorded: {shown!r} is not an argument you can edit here."
        texts[name] = value.strip()
    if not texts:
        return "Not recorded: no name=value lines after the first line."
    edited, errors = edits.apply_edits(view, fields, texts)
    if errors:
        named = (f"{card.clean(k, 40)}: {why}" for k, why in errors.items())
        return "Not recorded: " + "; ".join(named)
    changed = {key: edited[key] for key in texts}
    return Click(channel, typed.user, typed.request_id, "approve", edits=changed)


NOTHING_EDITABLE = "Nothing here can be edited in WeCom; edit it in gate."


def reject_hint(request_id: str) -> str:
    """The command that rejects with a reason."""
    # Square brackets: a text message would turn "<" into a look-alike (see answers.py).
    return f"reject {request_id} [your reason]"
