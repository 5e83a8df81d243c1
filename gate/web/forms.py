"""The decide form beyond yes/no: edited arguments, preset reject reasons and grants.

Parsing only: each function turns form fields into what `GateService.decide` takes, or raises
`FormError` with a sentence for the page. Whether the rule allows an edit, a reason or a grant
is the service's call (it raises `InvalidInput`), so the web page and the API cannot disagree.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import FormData

from gate.config.settings import parse_duration
from gate.decisions.grants import SCOPES, GrantAsk, pattern_offered
from gate.decisions.readmodel import RequestView
from gate.inputs.bodies import json_problem
from gate.text import untrusted

MAX_COMMENT = 2000
#: what the duration picker offers, capped per request by the rule's `max_grant`
GRANT_DURATIONS: list[tuple[str, str]] = [
    ("5m", "5 minutes"),
    ("15m", "15 minutes"),
    ("30m", "30 minutes"),
    ("1h", "1 hour"),
    ("4h", "4 hours"),
    ("8h", "8 hours"),
    ("24h", "24 hours"),
]
GRANT_SCOPE_LABELS = {
    "call": "this exact call (same tool, same arguments)",
    #: completed by the pinned argument names (`grant_scopes`)
    "pattern": "calls with the same",
    "session": "this tool in this agent session",
    "agent": "this tool for this agent",
}
#: the "extend deadline" buttons; anything else posted is refused
EXTEND_CHOICES = ("15m", "1h")


class FormError(Exception):
    """A form the page cannot act on; `message` is shown to the approver."""

    def __init__(self, message: str, status: int = 422, form: DecideForm | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = status
        #: what was sent, so the page can show it again
        self.form = form


@dataclass
class DecideForm:
    """A parsed Approve / Approve with edits / Reject form."""

    verdict: str
    comment: str
    edited_args: dict[str, Any] | None = None
    #: the editor's text as sent, to show it again beside an error
    edit_text: str | None = None
    reasons: list[str] = field(default_factory=list)
    grant: GrantAsk | None = None


def field_of(form: FormData, name: str) -> str | None:
    """One text field, or None when missing or a file."""
    value = form.get(name)
    return value if isinstance(value, str) else None


def parse_decide(form: FormData) -> DecideForm:
    """Read the decide form; FormError says what is wrong with it."""
    verdict = field_of(form, "verdict") or ""
    parsed = DecideForm(verdict=verdict, comment=(field_of(form, "comment") or "").strip())
    if verdict == "reject":
        parsed.reasons = [r for r in form.getlist("reasons") if isinstance(r, str) and r]
    else:
        parsed.edit_text = field_of(form, "edited_args")
    try:
        _check(form, parsed)
    except FormError as exc:
        exc.form = parsed
        raise
    return parsed


def _check(form: FormData, parsed: DecideForm) -> None:
    if parsed.verdict not in ("approve", "reject"):
        raise FormError("Choose Approve or Reject.", 400)
    if len(parsed.comment) > MAX_COMMENT:
        raise FormError(f"The comment is longer than {MAX_COMMENT} characters.")
    if parsed.verdict == "reject":
        if not parsed.comment and not parsed.reasons:
            raise FormError("Say why you reject it: the reason is what the agent is told.")
        return
    if parsed.edit_text is not None:
        parsed.edited_args = parse_edited_args(parsed.edit_text)
    scope = field_of(form, "grant_scope") or ""
    if scope:
        duration = field_of(form, "grant_duration") or ""
        if not duration:
            raise FormError("Choose how long the grant lasts.")
        parsed.grant = GrantAsk(scope, duration, _uses(form), _pins(form))


def _uses(form: FormData) -> int | None:
    text = field_of(form, "grant_uses") or ""
    if not text:
        return None  # the rule's most (or no count, when it sets none)
    if not (text.isascii() and text.isdigit()) or len(text) > 5:
        raise FormError("Choose how many calls the grant may let through.")
    return int(text)


def _pins(form: FormData) -> tuple[str, ...]:
    names = [n for n in form.getlist("grant_pin") if isinstance(n, str) and n]
    if len(names) > 50:
        raise FormError("Pin at most 50 arguments.")
    return tuple(dict.fromkeys(names))


def parse_edited_args(text: str) -> dict[str, Any]:
    """The JSON editor's text as an arguments object, or a FormError naming the problem."""
    if not text.strip():
        raise FormError(
            "The edited arguments are empty: write a JSON object such as "
            '{"amount": 500}, or use Approve to approve the call as asked.'
        )
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise FormError(
            f"The edited arguments are not valid JSON: {exc.msg} "
            f"(line {exc.lineno}, column {exc.colno})."
        ) from None
    except ValueError as exc:
        raise FormError(f"The edited arguments are not valid JSON: {exc}.") from None
    except RecursionError:  # Python's parser recurses once per nesting level
        raise FormError("The edited arguments are nested too deeply to read.") from None
    if not isinstance(value, dict):
        raise FormError(
            "The edited arguments must be a JSON object ({...} with named arguments), "
            f"not {_json_kind(value)}."
        )
    # The API's rules for a stored value (depth, size, NUL, 64-bit integers...).
    problem = json_problem(value)
    if problem is not None:
        at, why = problem
        raise FormError(f"The edited arguments cannot be stored: {at.lstrip('.')} {why}.")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Python keeps the last of two equal keys and a browser may keep either: refuse instead of
    # letting the approver believe one value while the agent runs another.
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"the key {key!r} appears twice")
        obj[key] = value
    return obj


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    return "a number"


def grant_scopes(view: RequestView) -> list[tuple[str, str]]:
    """The grant scopes this request's rule offers, as (value, label) for the form."""
    offered = view.offers.grant_scopes
    scopes: list[tuple[str, str]] = []
    for scope in SCOPES:
        if scope not in offered:
            continue
        if (scope == "session" and not view.session_id) or (scope == "agent" and not view.agent_id):
            continue
        if scope == "pattern" and not pattern_offered(view):
            continue
        label = GRANT_SCOPE_LABELS[scope]
        if scope == "pattern":
            label = f"{label} {', '.join(view.offers.grant_pin)} (and any you pin below)"
        scopes.append((scope, label))
    return scopes


def grant_pins(view: RequestView) -> list[tuple[str, str]]:
    """The arguments an approver may pin besides the rule's own (for a pattern grant), as
    (name, the name as shown: the agent chose it)."""
    if not pattern_offered(view):
        return []
    names = [name for name in view.tool_args if name not in view.offers.grant_pin][:50]
    return [(name, untrusted.clean(name, 80)) for name in names]


def grant_uses(view: RequestView) -> list[tuple[str, str]]:
    """How many uses a grant may have, as (value, label): "" is the rule's most."""
    cap = view.offers.max_grant_uses
    if cap is None:
        return [("", "any number of calls until it ends"), ("1", "once (single-use)")] + [
            (str(n), f"{n} calls") for n in (3, 10)
        ]
    fewer = [n for n in (1, 3, 10) if n < cap]
    return [("", f"{cap} calls (the most this rule allows)" if cap > 1 else "once")] + [
        (str(n), "once (single-use)" if n == 1 else f"{n} calls") for n in fewer
    ]


def grant_durations(view: RequestView) -> list[tuple[str, str]]:
    """Durations up to the rule's `max_grant`, as (value, label) for the form."""
    cap = view.offers.max_grant.total_seconds()
    choices = [
        (value, label)
        for value, label in GRANT_DURATIONS
        if parse_duration(value).total_seconds() <= cap
    ]
    if not choices or parse_duration(choices[-1][0]).total_seconds() < cap:
        # A cap between the presets (say 45m) is offered as itself, so it stays reachable.
        if cap < 60:
            choices.append((f"{int(cap)}s", f"{int(cap)} seconds (the longest allowed)"))
        else:
            minutes = math.floor(cap / 60)
            choices.append((f"{minutes}m", f"{minutes} minutes (the longest allowed)"))
    return choices
