"""The modals a click opens: why a request is rejected, "Edit & approve", and "Approve and
grant?", and the values a submitted modal carries back.

Pure functions. Argument values appear only as text inputs' prefilled values, never as
markdown. Each modal's custom_id names the request (and the picked reasons or grant); the
values come back by each text input's custom_id.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from channels import decisions, edits
from channels.discord import ids
from channels.discord.card import ACTION_ROW, editable
from channels.discord.markdown import (
    MAX_INPUT,
    MAX_INPUT_LABEL,
    MAX_MODAL_TITLE,
    MAX_REASON,
    cut,
    plain,
)
from gate.decisions.readmodel import RequestView

TEXT_INPUT, LABEL = 4, 18
SHORT, PARAGRAPH = 1, 2
REASON_INPUT = "reason"
NOTE_INPUT = "note"
#: a modal holds at most five rows; a submission with more is not one of ours
MAX_ROWS = 5


def _input(
    custom_id: str,
    label: str,
    *,
    required: bool,
    value: str | None = None,
    max_length: int = MAX_REASON,
    placeholder: str | None = None,
) -> dict[str, Any]:
    text_input: dict[str, Any] = {
        "type": TEXT_INPUT,
        "custom_id": custom_id,
        "label": cut(label, MAX_INPUT_LABEL),
        "style": PARAGRAPH if value is None or len(value) > 60 or "\n" in value else SHORT,
        "required": required,
        "max_length": max_length,
    }
    if value is not None:
        text_input["value"] = value
    if placeholder:
        text_input["placeholder"] = cut(placeholder, 100)
    return {"type": ACTION_ROW, "components": [text_input]}


def _modal(custom_id: str, title: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"custom_id": custom_id, "title": cut(title, MAX_MODAL_TITLE), "components": rows}


def reason_modal(view: RequestView, picked: list[int]) -> dict[str, Any]:
    """Why the request is rejected; with preset reasons `picked` (indexes), text is optional."""
    offered = decisions.reject_reasons(view)
    names = ", ".join(plain(offered[i], 60) for i in picked if i < len(offered))
    label = "Anything to add? The agent is told this." if picked else "Why? The agent is told this."
    placeholder = f"Rejecting with: {names}" if names else "What should the agent do instead?"
    row = _input(REASON_INPUT, label, required=not picked, placeholder=placeholder)
    custom_id = ids.build("rejectm", view.id, ids.reasons_mask(picked))
    return _modal(custom_id, "Reject request", [row])


def edit_input_id(index: int) -> str:
    """The text input of the `index`th editable field."""
    return f"e{index}"


def edit_modal(view: RequestView, fields: list[edits.EditField]) -> dict[str, Any]:
    """ "Edit & approve": one box per editable argument (JSON, prefilled), and a note."""
    rows = [
        _input(
            edit_input_id(i),
            plain(field.key, MAX_INPUT_LABEL) or "(empty key)",
            required=True,
            value=field.text,
            max_length=MAX_INPUT,
        )
        for i, field in enumerate(fields)
    ]
    placeholder = "Optional. Values are JSON; plain words are text."
    rows.append(_input(NOTE_INPUT, "Note for the agent", required=False, placeholder=placeholder))
    return _modal(ids.build("editm", view.id), "Edit & approve", rows)


def grant_modal(view: RequestView, scope: str, duration: str, label: str) -> dict[str, Any]:
    """Confirm "approve, and allow the same for a while" (a select has no confirm of its own)."""
    note = _input(NOTE_INPUT, "Note for the agent", required=False, placeholder=label)
    return _modal(ids.build("grantm", view.id, scope, duration), "Approve and grant?", [note])


def fields_by_input(view: RequestView | None) -> dict[str, edits.EditField]:
    """The edit modal's fields by text input custom_id, as the modal for `view` numbers them."""
    fields = editable(view) if view is not None else []
    return {edit_input_id(i): f for i, f in enumerate(fields)}


def submitted_values(components: Any) -> dict[str, str]:
    """A submitted modal's text values by input custom_id; ValueError for another shape.

    Rows are action rows holding one text input (or, in Discord's newer modals, labels
    holding one): at most five, each value a string of at most 4,000 characters.
    """
    if not isinstance(components, list) or len(components) > MAX_ROWS:
        raise ValueError("the modal's components are not gate's")
    values: dict[str, str] = {}
    for item in _inputs(components):
        custom_id, value = item.get("custom_id"), item.get("value")
        if not isinstance(custom_id, str) or not isinstance(value, str):
            raise ValueError("a modal value is missing")
        if len(custom_id) > 100 or len(value) > MAX_INPUT or custom_id in values:
            raise ValueError("a modal value is not gate's")
        values[custom_id] = value
    return values


def _inputs(rows: list[Any]) -> Iterator[dict[str, Any]]:
    for row in rows:
        if not isinstance(row, dict):
            raise ValueError("a modal row is not an object")
        if row.get("type") == LABEL and isinstance(row.get("component"), dict):
            inner = [row["component"]]
        elif row.get("type") == ACTION_ROW and isinstance(row.get("components"), list):
            inner = row["components"]
        else:
            raise ValueError("a modal row is not gate's")
        for item in inner[:1]:
            if not isinstance(item, dict) or item.get("type") != TEXT_INPUT:
                raise ValueError("a modal input is not a text input")
            yield item
