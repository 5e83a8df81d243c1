"""What an agent reports after the decision, and reads back: the call's outcome, the end of
its session, the request's audit trail.

Each use case owns its transaction, like those in gate.decisions.service; status changes go through
gate.decisions.machine.
"""

from __future__ import annotations

from gate.base import tracing
from gate.base.errors import Conflict
from gate.base.statuses import RequestStatus
from gate.decisions import audit, machine, outcomes, spans
from gate.decisions.readmodel import RequestView
from gate.decisions.service import GateService
from gate.identity.auth import Principal
from gate.store import trail
from gate.store.tables import AuditEvent


def record_outcome(
    service: GateService, request_id: str, principal: Principal, outcome: str, summary: str | None
) -> RequestView:
    """The agent reports whether the approved call ran and how it went (once)."""
    principal.require("agent", "admin")
    view = service.get(request_id, principal)
    if view.status != RequestStatus.approved:
        raise Conflict(
            f"only approved calls have an outcome; this one is {view.status}", code="not_approved"
        )
    with service.changing() as change:
        recorded = machine.record_outcome(
            change.session,
            request_id=request_id,
            outcome=outcome,
            summary=summary,
            actor=principal.name,
            now=service.clock(),
        )
        if recorded:  # staged too, so waiters and pages on other replicas hear of it
            change.touched(request_id)
    if not recorded:
        raise Conflict(
            f"the outcome was already recorded as {view.outcome!r}", code="outcome_recorded"
        )
    reported = service.get(request_id, principal)
    if tracing.tracer is not None:
        spans.reported(reported)
    return reported


def cancel_session(
    service: GateService, session_id: str, principal: Principal, why: str | None
) -> list[str]:
    """Cancel every pending request of an agent session (its session ended)."""
    principal.require("agent", "admin")
    only_of = principal.name if principal.role == "agent" else None
    with service.db.read() as session:
        ids = trail.pending_in_session(session, session_id, only_of)
    why = why or "the agent session ended"
    return [
        request_id
        for request_id in ids
        if isinstance(
            service.withdraw(request_id, actor=principal.name, via="agent", why=why),
            outcomes.Changed,
        )
    ]


def audit_trail(service: GateService, request_id: str, principal: Principal) -> list[AuditEvent]:
    """The request's audit events with their chain hashes."""
    service.get(request_id, principal)  # the same "who may see it" as the request itself
    return audit.trail(service.db, request_id)
