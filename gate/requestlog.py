"""The server log's lines about requests: one when a request is asked, one when it ends.

Working alone, the log is where a person running `gate serve` sees that a call waits for
them. Each line is written from what the use case already holds (the new request's view, the
state machine's outcome): it costs no statement. Names an agent chose (tool, agent) are
written with `repr` and cut, so a name cannot forge a line or flood the log.
"""

from __future__ import annotations

import logging

from gate.outcomes import Changed
from gate.readmodel import RequestView

log = logging.getLogger("gate.requests")

#: the longest name written to the log (past this, it is cut)
_LONGEST = 80


def _name(text: str | None) -> str:
    if text is None:
        return "-"
    return repr(text if len(text) <= _LONGEST else text[:_LONGEST] + "...")


def asked(view: RequestView, *, granted: bool) -> None:
    """A request was made (or, `granted`, born approved by a standing grant)."""
    if granted:
        log.info(
            "request %s approved by a grant: tool %s, rule %s, agent %s",
            view.id,
            _name(view.tool_name),
            _name(view.rule),
            _name(view.agent_id or view.submitted_by),
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
    )


def decided(*outcomes: Changed) -> None:
    """Requests ended (approved, rejected, expired or cancelled) in a committed change."""
    for outcome in outcomes:
        log.info(
            "request %s %s by %s via %s: tool %s, rule %s",
            outcome.request_id,
            outcome.status.value,
            outcome.by or "nobody",
            outcome.via or "-",
            _name(outcome.tool_name),
            _name(outcome.rule),
        )
