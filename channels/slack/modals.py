"""The modals a click opens: why a request is rejected, and "Edit & approve".

Pure functions of a request's view. In the edit modal argument values appear only as
plain_text_input initial values, never as mrkdwn. Each modal carries the request and the
card's message in `private_metadata`, which Slack hands back on submission.
"""

from __future__ import annotations

import json
from typing import Any

from channels import edits
from channels.slack.mrkdwn import (
    MAX_CHECKBOXES,
    MAX_INPUT,
    MAX_OPTION_TEXT,
    MAX_REASON,
    cut,
    plain,
    plain_object,
)
from gate.decisions.readmodel import RequestView

REJECT_CALLBACK = "gate_reject_reason"
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"
REASONS_BLOCK = "reasons"
REASONS_INPUT = "reasons_input"
EDIT_CALLBACK = "gate_edit_approve"
EDIT_INPUT = "value"
COMMENT_BLOCK = "comment"
COMMENT_INPUT = "comment_input"


def _meta(request_id: str, channel_id: str | None, message_ts: str | None) -> str:
    return json.dumps({"request_id": request_id, "channel_id": channel_id, "ts": message_ts})


def _text_input(block_id: str, action_id: str, label: str, *, optional: bool) -> dict[str, Any]:
    return {
        "type": "input",
        "block_id": block_id,
        "optional": optional,
        "label": plain_object(label),
        "element": {
            "type": "plain_text_input",
            "action_id": action_id,
            "multiline": True,
            "max_length": MAX_REASON,
        },
    }


def _reasons_input(reasons: list[str]) -> dict[str, Any]:
    options = [
        {"text": plain_object(cut(plain(r, MAX_OPTION_TEXT), MAX_OPTION_TEXT)), "value": f"r{i}"}
        for i, r in enumerate(reasons[:100])
    ]
    element: dict[str, Any] = (
        {"type": "checkboxes", "action_id": REASONS_INPUT, "options": options}
        if len(options) <= MAX_CHECKBOXES
        else {
            "type": "multi_static_select",
            "action_id": REASONS_INPUT,
            "placeholder": plain_object("Pick reasons"),
            "options": options,
        }
    )
    return {
        "type": "input",
        "block_id": REASONS_BLOCK,
        "optional": True,
        "label": plain_object("Reasons"),
        "element": element,
    }


def reason_modal(
    request_id: str,
    channel_id: str | None,
    message_ts: str | None,
    reasons: list[str] | None = None,
) -> dict[str, Any]:
    """The modal that asks why a request is rejected; the reason is what the model is told.

    With the rule's preset `reasons`, they are offered as options and the text is optional.
    """
    blocks: list[dict[str, Any]] = [_reasons_input(reasons)] if reasons else []
    label = (
        "Anything to add? The agent is told this." if reasons else "Why? The agent is told this."
    )
    blocks.append(_text_input(REASON_BLOCK, REASON_INPUT, label, optional=bool(reasons)))
    return {
        "type": "modal",
        "callback_id": REJECT_CALLBACK,
        "private_metadata": _meta(request_id, channel_id, message_ts),
        "title": plain_object("Reject request"),
        "submit": plain_object("Reject"),
        "close": plain_object("Cancel"),
        "blocks": blocks,
    }


def edit_block_id(index: int) -> str:
    """The input block of the `index`th editable field."""
    return f"edit_{index}"


def _edit_input(index: int, field: edits.EditField) -> dict[str, Any]:
    return {
        "type": "input",
        "block_id": edit_block_id(index),
        "label": plain_object(plain(field.key, 150) or "(empty key)"),
        "element": {
            "type": "plain_text_input",
            "action_id": EDIT_INPUT,
            "multiline": len(field.text) > 60 or "\n" in field.text,
            "initial_value": field.text,
            "max_length": MAX_INPUT,
        },
    }


def edit_modal(
    view: RequestView,
    fields: list[edits.EditField],
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
    blocks: list[dict[str, Any]] = [{"type": "section", "text": plain_object(note)}]
    blocks.extend(_edit_input(i, field) for i, field in enumerate(fields))
    comment = "Note for the agent (optional)"
    blocks.append(_text_input(COMMENT_BLOCK, COMMENT_INPUT, comment, optional=True))
    return {
        "type": "modal",
        "callback_id": EDIT_CALLBACK,
        "private_metadata": _meta(view.id, channel_id, message_ts),
        "title": plain_object("Edit & approve"),
        "submit": plain_object("Approve"),
        "close": plain_object("Cancel"),
        "blocks": blocks,
    }


def editable(view: RequestView) -> list[edits.EditField]:
    """The arguments the edit modal offers (secrets and over-long values left out)."""
    return edits.editable_fields(view, max_chars=MAX_INPUT)


def fields_by_block(view: RequestView | None) -> dict[str, edits.EditField]:
    """The edit modal's fields by input block id, as the modal for `view` numbers them."""
    fields = editable(view) if view is not None else []
    return {edit_block_id(i): f for i, f in enumerate(fields)}
