"""Reading a Slack callback: the signature on the raw bytes first, then the payload.

`verify_signature` runs before anything parses the body. `parse_interaction` turns a verified
interaction payload into an `Interaction`, Slack's own shape of a click (which card, which
message, which modal fields); `channels.slack.clicks` turns that into gate's neutral `Click`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from urllib.parse import parse_qs

from channels import decisions
from channels.inbound import deadline_from_iso, load_json, same_secret
from channels.slack.card import (
    ACKNOWLEDGE_ACTION,
    APPROVE_ACTION,
    EDIT_ACTION,
    EXTEND_ACTION,
    GRANT_ACTION,
    REJECT_ACTION,
)
from channels.slack.modals import (
    COMMENT_BLOCK,
    COMMENT_INPUT,
    EDIT_CALLBACK,
    EDIT_INPUT,
    REASON_BLOCK,
    REASON_INPUT,
    REASONS_BLOCK,
    REASONS_INPUT,
    REJECT_CALLBACK,
)
from gate.base.errors import Unauthenticated

#: Slack signs "v0:<timestamp>:<body>" and accepts a request for five minutes either way
SIGNATURE_WINDOW_SECONDS = 300
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def verify_signature(secret: bytes, body: bytes, headers: Mapping[str, str], *, now: float) -> None:
    """Check Slack's signature and the 5-minute window on the raw body; 401 otherwise.

    The HMAC is over the bytes as received and compared as bytes, so any header text
    (non-ASCII, absurdly long) is a mismatch, never an exception.
    """
    timestamp = headers.get("x-slack-request-timestamp") or ""
    signature = headers.get("x-slack-signature") or ""
    # isdigit() alone accepts "²"; more than 12 digits is no Unix time gate will see.
    fresh = timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12
    if fresh:
        fresh = abs(now - int(timestamp)) <= SIGNATURE_WINDOW_SECONDS
    if fresh and signature:
        base = b"v0:" + timestamp.encode() + b":" + body
        expected = "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()
        if same_secret(signature, expected):
            return
    raise Unauthenticated(
        "the Slack signature is missing, wrong or too old", code="invalid_signature"
    )


def form_payload(body: bytes) -> dict[str, Any]:
    """The JSON object in a form-encoded `payload=` body (or a raw JSON body)."""
    text = body.decode("utf-8")
    if text.lstrip().startswith("{"):
        raw = text
    else:
        fields = parse_qs(text, keep_blank_values=True, strict_parsing=False)
        if "payload" not in fields:
            raise ValueError("the body has no payload field")
        raw = fields["payload"][0]
    data = load_json(raw)
    if not isinstance(data, dict):
        raise ValueError("the payload is not a JSON object")
    return data


Kind = Literal[
    "approve", "ask_reason", "reject", "ask_edits", "edit", "extend", "acknowledge", "ignore"
]
_BUTTONS: dict[str, Kind] = {
    ACKNOWLEDGE_ACTION: "acknowledge",
    APPROVE_ACTION: "approve",
    REJECT_ACTION: "ask_reason",
    EDIT_ACTION: "ask_edits",
    EXTEND_ACTION: "extend",
}


@dataclass(frozen=True)
class Interaction:
    """What a Slack interaction asks for, still in Slack's terms (blocks, option values)."""

    kind: Kind
    user_id: str = ""
    request_id: str = ""
    channel_id: str | None = None
    message_ts: str | None = None
    trigger_id: str | None = None
    reason: str | None = None
    #: (scope, duration) picked in the "Approve for a while" select
    grant: tuple[str, str] | None = None
    #: option values (`r<index>`) of the preset reject reasons ticked in the modal
    reasons: tuple[str, ...] = ()
    #: (block_id, text) of each edit box in the "Edit & approve" modal
    edits: tuple[tuple[str, str], ...] = ()
    #: when Slack says the click happened (`actions[].action_ts`); with trigger_id it tells
    #: a new click from the same click delivered again
    action_ts: str | None = None
    #: the deadline the card showed when Extend was clicked
    extend_from: datetime | None = None

    @property
    def click_id(self) -> str:
        """The same for every delivery of one click, different for the next click."""
        return "|".join(
            (self.kind, self.user_id, self.request_id, self.trigger_id or "", self.action_ts or "")
        )


def parse_interaction(payload: Mapping[str, Any]) -> Interaction:
    """Translate a Slack interaction payload; raises ValueError when it is malformed."""
    kind = payload.get("type")
    if kind not in ("block_actions", "view_submission"):
        return Interaction("ignore")
    user = payload.get("user")
    user_id = user.get("id") if isinstance(user, dict) else None
    if not isinstance(user_id, str) or not _ID.match(user_id):
        raise ValueError("the payload has no valid user.id")
    if kind == "view_submission":
        return _parse_submission(payload, user_id)
    return _parse_block_action(payload, user_id)


def _parse_block_action(payload: Mapping[str, Any], user_id: str) -> Interaction:
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise ValueError("a block_actions payload needs actions[]")
    first = actions[0]
    action_id = first.get("action_id")
    grant = None
    extend_from = None
    request_id: Any
    if action_id == GRANT_ACTION:
        selected = first.get("selected_option")
        value = selected.get("value") if isinstance(selected, dict) else None
        request_id, _, choice = str(value or "").partition("|")
        grant = decisions.parse_grant(choice)
        clicked: Kind = "approve"
    elif action_id in _BUTTONS:
        # Extend's value also carries the deadline the card showed: "<id>|<ISO time>"
        request_id, _, shown = str(first.get("value") or "").partition("|")
        clicked = _BUTTONS[action_id]
        extend_from = _deadline(shown) if clicked == "extend" else None
    else:
        return Interaction("ignore", user_id)  # e.g. a link button: acknowledged, nothing to do
    container, channel = _obj(payload, "container"), _obj(payload, "channel")
    trigger = payload.get("trigger_id")
    return Interaction(
        clicked,
        user_id,
        _request_id(request_id),
        _str(container.get("channel_id")) or _str(channel.get("id")),
        _str(container.get("message_ts")),
        trigger if isinstance(trigger, str) and trigger else None,
        grant=grant,
        action_ts=_str(first.get("action_ts")),
        extend_from=extend_from,
    )


def _parse_submission(payload: Mapping[str, Any], user_id: str) -> Interaction:
    view = payload.get("view")
    callback = view.get("callback_id") if isinstance(view, dict) else None
    if not isinstance(view, dict) or callback not in (REJECT_CALLBACK, EDIT_CALLBACK):
        return Interaction("ignore", user_id)
    try:
        meta = load_json(view.get("private_metadata") or "")
        values = view["state"]["values"]
        if not isinstance(meta, dict) or not isinstance(values, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ValueError("the modal submission lacks its request or values") from None
    where = (
        _request_id(meta.get("request_id")),
        _str(meta.get("channel_id")),
        _str(meta.get("ts")),
    )
    if callback == EDIT_CALLBACK:
        edits = tuple(
            (block_id, _input_text(values, block_id, EDIT_INPUT))
            for block_id in values
            if isinstance(block_id, str) and block_id.startswith("edit_")
        )
        comment = _input_text(values, COMMENT_BLOCK, COMMENT_INPUT).strip()
        return Interaction("edit", user_id, *where, reason=comment or None, edits=edits)
    picked = _obj(_obj(values, REASONS_BLOCK), REASONS_INPUT).get("selected_options") or []
    reasons = tuple(str(o.get("value")) for o in picked if isinstance(o, dict) and o.get("value"))
    if REASON_BLOCK not in values and not reasons:
        raise ValueError("the modal submission lacks its reason")
    reason = _input_text(values, REASON_BLOCK, REASON_INPUT).strip()
    return Interaction("reject", user_id, *where, reason=reason, reasons=reasons)


def _deadline(text: str) -> datetime | None:
    """The deadline an Extend button carried (None for cards posted before it did)."""
    if not text:
        return None
    return deadline_from_iso(text)


def _input_text(values: Mapping[str, Any], block_id: str, action_id: str) -> str:
    value = _obj(_obj(values, block_id), action_id).get("value")
    return value if isinstance(value, str) else ""


def _request_id(value: Any) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise ValueError("the button carries no valid request id")
    return value


def _obj(payload: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = payload.get(key)
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
