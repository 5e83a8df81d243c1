"""Approve with edits on a chat card, for every chat channel: the fields a card may offer
for editing, reading back what an approver typed (with the API's rules, so a card cannot
store what the API would refuse), and the changes an approval made, as every card shows them.

Pure functions over a `RequestView`; each channel renders the fields in its own form
language and reads them back from its own callback shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from channels.inbound import NestedTooDeep, load_json
from gate.asking.binding import argument_diff
from gate.decisions.readmodel import RequestView
from gate.inputs.bodies import json_problem, key_path
from gate.text import untrusted

#: a chat form is read on a phone; more fields than this belong in the web page's editor
MAX_EDIT_FIELDS = 10


@dataclass(frozen=True)
class EditField:
    """One top-level argument offered for editing, with its current value as JSON text."""

    key: str
    text: str


def editable_fields(view: RequestView, *, max_chars: int) -> list[EditField]:
    """The arguments a chat form may offer for editing; empty when edits are not allowed.

    Fields holding secrets (what `untrusted.mask_value` would hide) and values longer than
    the platform's input box (`max_chars`) are left out: they keep their values, the web page
    can edit them. Invisible characters show as \\uXXXX escapes, so a box cannot read
    differently from what it holds (and the escapes parse back to the same value).
    """
    if view.status != "pending" or not view.offers.allow_edits:
        return []
    if view.approvals_required != 1:
        return []  # one approver cannot edit what others approve as asked
    wanted = view.offers.editable
    keys = list(view.tool_args) if wanted is None else [k for k in wanted if k in view.tool_args]
    fields = []
    for key in keys:
        value = view.tool_args[key]
        # Length first (escaping only lengthens): scanning a value too long to offer is waste.
        text = json.dumps(value, ensure_ascii=False)
        if len(text) > max_chars or len(key) > 200:
            continue
        text = untrusted.escape_invisible(text)
        if len(text) <= max_chars and untrusted.mask_value({key: value}) == {key: value}:
            fields.append(EditField(key, text))
        if len(fields) == MAX_EDIT_FIELDS:
            break
    return fields


def named_by_a_line(field: EditField) -> bool:
    """Whether a typed `name = value` line can name this field, and list it truthfully: an
    argument's name is the agent's, and one with a line break would draw a line of its own
    (`to = "bob"` above the real `to`), one with `=` or spaces around it cannot be read
    back. Channels that take edits as typed lines offer only these."""
    key = field.key
    return bool(key) and "=" not in key and key.strip() == key and len(key.splitlines()) == 1


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"


def parse_edit(original: Any, text: str) -> Any:
    """An edited value: JSON when it parses, otherwise the text itself as a string.

    Raises ValueError for broken JSON (text starting with `{`, `[` or `"`, or nested too
    deeply to read) and for a value of another type than the original (a number stays a
    number), so a slip is caught here. `apply_edits` then checks it can be stored.
    """
    stripped = text.strip()
    try:
        value = load_json(stripped)
    except NestedTooDeep as exc:
        raise ValueError(str(exc)) from None
    except ValueError:
        if stripped[:1] in ("{", "[", '"'):
            raise ValueError("not valid JSON: check the brackets and quotes") from None
        value = text
    if isinstance(original, str) and not isinstance(value, str):
        value = text  # unquoted text in a text field stays text ("123" for an id)
    elif original is not None and _kind(value) != _kind(original):
        raise ValueError(f"expected {_kind(original)}, like the original value")
    return value


def apply_edits(
    view: RequestView, fields: list[EditField], texts: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The full edited arguments from the submitted `texts` (by key), and errors by key."""
    edited = dict(view.tool_args)
    errors: dict[str, str] = {}
    for field in fields:
        if field.key not in texts:
            continue
        try:
            value = parse_edit(view.tool_args[field.key], texts[field.key])
        except ValueError as exc:
            errors[field.key] = str(exc)
            continue
        # Checked where it will sit (one level down in the arguments), with the API's rules:
        # an edit the API would refuse (too deep, NaN, a NUL character...) is refused here.
        problem = json_problem({field.key: value})
        if problem is not None:
            inner = problem[0][len(key_path(field.key)) :]
            errors[field.key] = f"{inner} {problem[1]}" if 0 < len(inner) <= 40 else problem[1]
            continue
        edited[field.key] = value
    whole = None if errors else json_problem(edited)
    if whole is not None:  # each value fits, together they are too many
        first = next((f.key for f in fields if f.key in texts), None)
        if first is not None:
            errors[first] = f"together, the edited arguments {whole[1]}"
    return edited, errors


def changes(view: RequestView) -> list[tuple[str, str, str]]:
    """(key, before, after) for each argument an approver changed, as JSON, secrets masked."""
    if view.approved_args is None:
        return []
    diff = untrusted.mask_diff(argument_diff(view.tool_args, view.approved_args))
    return [
        (key, untrusted.to_json(d["from"]), untrusted.to_json(d["to"])) for key, d in diff.items()
    ]
