"""Reading a click on a Feishu card, and translating it into gate's neutral `Click`.

`parse_action` reads a verified `card.action.trigger` body (schema 2.0, or the legacy flat
shape) into a `CardAction`: the platform's shape, with form values as the card named them
(`r<index>` for a preset reason, `f<index>` for an edit box, `scope:duration` for a grant).
`to_click` maps those names back to what the card showed for the request's view and builds
the `Click`: edits by argument name, reasons as their text, a grant as (scope, duration).
What the click may do is then gate's question, not this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from channels import decisions, edits
from channels.feishu.card import clean, editable
from channels.inbound import deadline_from_iso, load_json
from gate.base.errors import BadRequest
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import Action, Click

#: what a card button may ask for: decide, open or leave the edit form, extend the deadline,
#: say "I'm on it"
VERDICTS = ("approve", "reject", "edit", "approve_edits", "view", "extend", "acknowledge")
#: the longest reason kept from the reason box (the box itself allows as much)
MAX_COMMENT = 500
NEED_A_REASON = (
    "Type a reason in the box (or pick a preset), then press Reject: the agent is told why."
)
NOTHING_EDITABLE = "Nothing here can be edited in Feishu; edit it in gate."


@dataclass(frozen=True)
class CardAction:
    """A click on one of our buttons, as the platform reported it."""

    request_id: str
    verdict: str
    open_id: str
    comment: str | None
    event_id: str | None
    message_id: str | None
    legacy: bool = False
    #: option values (`r<index>`) of the preset reject reasons picked in the form
    reasons: tuple[str, ...] = ()
    #: the "approve for a while" choice (`scope:duration`), if one was picked
    grant: str | None = None
    #: the edit form's texts by field index ("approve_edits")
    edits: tuple[tuple[int, str], ...] = ()
    #: the deadline the card showed when Extend was clicked
    extend_from: datetime | None = None


def parse_action(payload: Mapping[str, Any]) -> CardAction:
    """Read a `card.action.trigger` body (schema 2.0, or the legacy flat shape)."""
    legacy = "schema" not in payload and "event" not in payload
    event = payload if legacy else payload.get("event")
    if not isinstance(event, Mapping):
        raise BadRequest("card callback has no event", code="bad_callback")
    action = event.get("action")
    if not isinstance(action, Mapping):
        raise BadRequest("card callback has no action", code="bad_callback")
    request_id, verdict, extend_from = _our_value(action.get("value"))
    open_id = _operator(event, legacy)
    form = action.get("form_value")
    form = form if isinstance(form, Mapping) else {}
    comment = form.get("reason")
    comment = clean(comment, MAX_COMMENT, mask=False).strip() if isinstance(comment, str) else None
    picked = form.get("reasons")
    grant = form.get("grant")
    header = payload.get("header")
    event_id = header.get("event_id") if isinstance(header, Mapping) else None
    context = event.get("context")
    message_id = (
        context.get("open_message_id") if isinstance(context, Mapping) else None
    ) or event.get("open_message_id")
    return CardAction(
        request_id=request_id,
        verdict=verdict,
        open_id=open_id,
        comment=comment or None,
        event_id=str(event_id) if event_id else None,
        message_id=str(message_id) if message_id else None,
        legacy=legacy,
        reasons=tuple(str(r) for r in picked) if isinstance(picked, list) else (),
        grant=grant if isinstance(grant, str) and grant else None,
        edits=tuple(sorted(edits_from(form).items())),
        extend_from=extend_from,
    )


def _our_value(value: Any) -> tuple[str, str, datetime | None]:
    """(request id, verdict, deadline shown) from a button value we put on the card; 400 for
    anyone else's."""
    if isinstance(value, str):
        try:
            value = load_json(value)
        except ValueError:
            value = None
    if not isinstance(value, Mapping):
        raise BadRequest("the button value is not ours", code="bad_callback")
    request_id, verdict = value.get("request_id"), value.get("verdict")
    if not isinstance(request_id, str) or not request_id or verdict not in VERDICTS:
        raise BadRequest("the button value is not ours", code="bad_callback")
    shown = value.get("shown")
    try:
        when = deadline_from_iso(shown) if isinstance(shown, str) else None
    except ValueError:
        raise BadRequest("the button value is not ours", code="bad_callback") from None
    return request_id, str(verdict), when


def _operator(event: Mapping[str, Any], legacy: bool) -> str:
    """The clicker's open_id (in this app): `event.operator`, or the legacy top-level field."""
    operator = event.get("operator")
    open_id = event.get("open_id") if legacy else None
    if isinstance(operator, Mapping):
        open_id = operator.get("open_id")
    if not isinstance(open_id, str) or not open_id:
        raise BadRequest("card callback names no operator", code="bad_callback")
    return open_id


def edits_from(form: Mapping[str, Any]) -> dict[int, str]:
    """The edit inputs' texts in a submitted form, by field index (`f<index>`)."""
    texts = {}
    for name, value in form.items():
        if isinstance(name, str) and name[:1] == "f" and name[1:].isdigit():
            texts[int(name[1:])] = value if isinstance(value, str) else ""
    return texts


def grant_click(channel: str, action: CardAction) -> Click | str:
    """An Approve click, with the grant picked in the form; a toast text if it is not one."""
    try:
        grant = decisions.parse_grant(action.grant) if action.grant else None
    except ValueError as exc:
        return f"Not recorded: {exc}."
    return Click(channel, action.open_id, action.request_id, "approve", action.comment, grant=grant)


def to_click(channel: str, action: CardAction, view: RequestView | None) -> Click | str:
    """The `Click` an approve / reject / approve-with-edits press means, or a toast text when
    the form cannot be read back (no reason given, a value that does not parse).

    `view` is the request as it is now: the form named reasons and edit boxes by their place
    on the card rendered from it. A missing or finished request passes through as a bare
    click, so gate answers "no longer exists" / "already approved by X".
    """
    if action.verdict == "approve":
        return grant_click(channel, action)
    verdict: Action = "reject" if action.verdict == "reject" else "approve"
    bare = Click(channel, action.open_id, action.request_id, verdict, action.comment)
    if view is None or view.is_final:
        return bare
    if action.verdict == "reject":
        if not action.comment and not action.reasons:
            return NEED_A_REASON
        try:
            picked = decisions.reasons_from(view, list(action.reasons))
        except ValueError as exc:
            return f"Not recorded: {exc}."
        return Click(
            channel, action.open_id, action.request_id, "reject", action.comment,
            reasons=tuple(picked),
        )  # fmt: skip
    return _edits_click(bare, action, view)


def _edits_click(bare: Click, action: CardAction, view: RequestView) -> Click | str:
    """An "Approve with edits" press: each box's text parsed back into its argument."""
    fields = editable(view)
    if not fields:
        return NOTHING_EDITABLE
    texts = {fields[i].key: text for i, text in action.edits if i < len(fields)}
    edited, errors = edits.apply_edits(view, fields, texts)
    if errors:
        # An argument's name is untrusted text, like anything else shown in a toast.
        named = (f"{clean(k, 40)}: {why}" for k, why in errors.items())
        return "Not recorded: " + "; ".join(named)
    changed = {key: edited[key] for key in texts}
    return Click(
        bare.channel, bare.user_id, bare.request_id, "approve", bare.comment, edits=changed
    )
