"""Reading an `adaptiveCard/action` invoke, and translating it into gate's neutral `Click`.

`parse_invoke` reads a verified invoke activity into a `CardAction`: the verb of the
`Action.Execute` pressed, the data our card put on it merged (by Teams) with the values of
the card's inputs, and who pressed it: `from.aadObjectId`, the person's Entra object id,
which `[[approvers]] teams = "..."` names. Display names are never read. `to_click` maps
the input values back to what the card offered for the request's view: preset reasons
`r<index>`, edit boxes `f<index>`, a grant `scope:duration`. What the click may do is then
gate's question, not this module's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from channels import decisions, edits
from channels.inbound import deadline_from_iso
from channels.teams.card import VERBS, clean, edit_input_id, editable
from gate.base.errors import BadRequest
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import Click
from gate.text import untrusted

INVOKE_NAME = "adaptiveCard/action"
MAX_COMMENT = 500
#: an Entra object id is a GUID; anything else is not a person gate could know
_OBJECT_ID = untrusted.compile(
    r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: how `[[approvers]] teams` must be written: the object id as a press carries it (lowercase)
ENTRA_OBJECT_ID = untrusted.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
NEED_A_REASON = "Type a reason (or pick a preset), then press Reject: the agent is told why."
NOTHING_EDITABLE = "Nothing here can be edited in Teams; edit it in gate."


@dataclass(frozen=True)
class CardAction:
    """A press of one of our Action.Execute buttons, as Teams reported it."""

    verb: str
    request_id: str
    #: the presser's Entra object id (`from.aadObjectId`)
    object_id: str
    #: the presser's Teams id in this bot's conversations (`from.id`, `29:...`)
    member_id: str | None
    #: the invoke activity's id: the same for every delivery of one press
    activity_id: str | None
    #: "automatic" for a refresh Teams ran by itself, "manual" for a press
    trigger: str
    #: the activity id of the message whose card was pressed (`replyToId`)
    reply_to: str | None = None
    #: the card's inputs, by id, as typed (strings)
    inputs: dict[str, str] = field(default_factory=dict)
    #: the deadline the card showed when Extend was pressed
    extend_from: datetime | None = None

    @property
    def delivery_key(self) -> str | None:
        """What a repeated delivery of this press shares (None: Teams sent no activity id)."""
        if not self.activity_id:
            return None
        return f"{self.activity_id}|{self.object_id}|{self.request_id}|{self.verb}"


def is_card_action(activity: Mapping[str, Any]) -> bool:
    """Whether a verified activity is an Action.Execute press (anything else is acknowledged)."""
    return activity.get("type") == "invoke" and activity.get("name") == INVOKE_NAME


def parse_invoke(activity: Mapping[str, Any]) -> CardAction:
    """Read an `adaptiveCard/action` invoke; 400 for one that is not ours."""
    value = activity.get("value")
    action = value.get("action") if isinstance(value, dict) else None
    if not isinstance(action, dict) or action.get("type") != "Action.Execute":
        raise BadRequest("the invoke carries no Action.Execute", code="bad_invoke")
    verb, data = action.get("verb"), action.get("data")
    if verb not in VERBS or not isinstance(data, dict):
        raise BadRequest("the action is not one of gate's", code="bad_invoke")
    request_id = data.get("request_id")
    if not isinstance(request_id, str) or not _REQUEST_ID.match(request_id):
        raise BadRequest("the action names no request", code="bad_invoke")
    sender = activity.get("from")
    object_id = sender.get("aadObjectId") if isinstance(sender, dict) else None
    if not isinstance(object_id, str) or not _OBJECT_ID.fullmatch(object_id):
        raise BadRequest("the invoke names no Entra user (from.aadObjectId)", code="bad_invoke")
    member_id = sender.get("id") if isinstance(sender, dict) else None
    activity_id = activity.get("id")
    trigger = value.get("trigger") if isinstance(value, dict) else None
    reply_to = activity.get("replyToId")
    inputs = {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
    return CardAction(
        verb=str(verb),
        request_id=request_id,
        object_id=object_id.lower(),
        member_id=member_id if isinstance(member_id, str) and member_id else None,
        activity_id=activity_id if isinstance(activity_id, str) and activity_id else None,
        trigger=trigger if trigger in ("automatic", "manual") else "manual",
        reply_to=reply_to if isinstance(reply_to, str) and 0 < len(reply_to) <= 200 else None,
        inputs=inputs,
        extend_from=_deadline(data.get("extend_from")) if verb == "extend" else None,
    )


def _deadline(shown: Any) -> datetime | None:
    """The deadline an Extend button carried; 400 for one we could not have written."""
    if shown is None:
        return None
    try:
        if not isinstance(shown, str):
            raise ValueError("the Extend button carries no valid deadline")
        return deadline_from_iso(shown)
    except ValueError:
        raise BadRequest("the Extend button carries no valid deadline", code="bad_invoke") from None


def comment(action: CardAction, key: str) -> str | None:
    """What the presser typed in a text box, cleaned but not masked (the agent is told it)."""
    text = action.inputs.get(key, "")
    return clean(text, MAX_COMMENT, mask=False).strip() or None


def approve_click(channel: str, action: CardAction) -> Click | str:
    """Approve, with the grant picked in the card (if any); a notice if it is not one."""
    picked = action.inputs.get("grant") or None
    try:
        grant = decisions.parse_grant(picked) if picked else None
    except ValueError as exc:
        return f"Not recorded: {exc}."
    return Click(channel, action.object_id, action.request_id, "approve", grant=grant)


def reject_click(channel: str, action: CardAction, view: RequestView | None) -> Click | str:
    """Reject with the reason typed and the presets picked; a notice when neither is given."""
    reason = comment(action, "reason")
    bare = Click(channel, action.object_id, action.request_id, "reject", reason)
    if view is None or view.is_final:
        return bare  # gate answers "no longer exists" / "already approved by X"
    values = [v for v in action.inputs.get("reasons", "").split(",") if v]
    if not reason and not values:
        return NEED_A_REASON
    try:
        picked = decisions.reasons_from(view, values)
    except ValueError as exc:
        return f"Not recorded: {exc}."
    return Click(
        channel, action.object_id, action.request_id, "reject", reason, reasons=tuple(picked)
    )


def edits_click(channel: str, action: CardAction, view: RequestView | None) -> Click | str:
    """Approve with the edit boxes' texts parsed back into their arguments (by name)."""
    note = comment(action, "note")
    bare = Click(channel, action.object_id, action.request_id, "approve", note)
    if view is None or view.is_final:
        return bare
    fields = editable(view)
    if not fields:
        return NOTHING_EDITABLE
    texts = {
        f.key: action.inputs[edit_input_id(i)]
        for i, f in enumerate(fields)
        if edit_input_id(i) in action.inputs
    }
    edited, errors = edits.apply_edits(view, fields, texts)
    if errors:
        # An argument's name is untrusted text, like anything else shown in the card.
        return "Not recorded: " + "; ".join(f"{clean(k, 40)}: {why}" for k, why in errors.items())
    changed = {key: edited[key] for key in texts if edited[key] != view.tool_args.get(key)}
    return Click(
        channel, action.object_id, action.request_id, "approve", note, edits=changed or None
    )
