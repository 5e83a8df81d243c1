"""The server log's lines about requests: one when a request is asked, one when it ends.

Working alone, the log is where a person running `gate serve` sees that a call waits for
them. Each line is written from what the use case already holds (the new request's view, the
state machine's outcome): it costs no statement. Names an agent chose (tool, agent) are
written with `repr` and cut, so a name cannot forge a line or flood the log.
"""

from __future__ import annotations

import logging
from typing import Any

from gate.decisions.outcomes import Changed
from gate.decisions.readmodel import RequestView

log = logging.getLogger("gate.requests")

#: the longest name written to the log (past this, it is cut)
_LONGEST = 80


def _name(text: str | None) -> str:
    if text is None:
        return "-"
    return repr(text if len(text) <= _LONGEST else text[:_LONGEST] + "...")


def _fields(request_id: str, tool: str | None, rule: str | None, outcome: str) -> dict[str, Any]:
    """The line's keys in the JSON log (`gate.base.logs`): the same facts, for machines."""
    return {
        "fields": {
            "request": request_id,
            "tool": _cut(tool),
            "rule": _cut(rule),
            "outcome": outcome,
        }
    }


def _cut(text: str | None) -> str | None:
    return text if text is None or len(text) <= _LONGEST else text[:_LONGEST] + "..."


def asked(view: RequestView, *, granted: bool) -> None:
    """A request was made (or, `granted`, born approved by a standing grant)."""
    if not log.isEnabledFor(logging.INFO):
        return
    if granted:
        log.info(
            "request %s approved by a grant: tool %s, rule %s, agent %s",
            view.id,
            _name(view.tool_name),
            _name(view.rule),
            _name(view.agent_id or view.submitted_by),
            extra=_fields(view.id, view.tool_name, view.rule, "approved"),
        )
        return
    log.info(
        "request %s asked: tool %s, rule %s, agent %s, approvers %s, until %s",
        view.id,
        _name(view.tool_name),
        _name(view.rule),
        _name(view.agent_id or view.submitted_by),
        ",".join(view.approvers) or "anyone who may decide",
        view.expires_at.isoformat(timespec="seconds"),
        extra=_fields(view.id, view.tool_name, view.rule, "asked"),
    )


def decided(*outcomes: Changed) -> None:
    """Requests ended (approved, rejected, expired or cancelled) in a committed change."""
    if not log.isEnabledFor(logging.INFO):
        return
    for outcome in outcomes:
        log.info(
            "request %s %s by %s via %s: tool %s, rule %s",
            outcome.request_id,
            outcome.status.value,
            outcome.by or "nobody",
            outcome.via or "-",
            _name(outcome.tool_name),
            _name(outcome.rule),
            extra=_fields(
                outcome.request_id, outcome.tool_name, outcome.rule, outcome.status.value
            ),
        )
