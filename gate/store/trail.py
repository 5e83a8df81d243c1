"""The audit trail's reads: a request's events, every event for `gate audit verify`, and
what an approver revealed. Appending an event is the state machine's verb
(`gate.store.decisions`); these only look.
"""

from __future__ import annotations

from collections.abc import Iterator

from sqlmodel import Session, col, select

from gate.base.statuses import RequestStatus
from gate.store.tables import AuditEvent, ConfirmationRequest


def events_of(session: Session, request_id: str) -> list[AuditEvent]:
    """`request_id`'s events, oldest first, with their chain hashes."""
    stmt = (
        select(AuditEvent)
        .where(col(AuditEvent.request_id) == request_id)
        .order_by(col(AuditEvent.id))
    )
    return list(session.exec(stmt).all())


def every_event(session: Session) -> Iterator[AuditEvent]:
    """Every event, request by request, each request's oldest first."""
    stmt = select(AuditEvent).order_by(col(AuditEvent.request_id), col(AuditEvent.id))
    yield from session.exec(stmt.execution_options(yield_per=1000))


def details_of(session: Session, request_id: str, kind: str, actor: str) -> list[object]:
    """The `detail` of each event of `kind` by `actor` on `request_id`."""
    stmt = select(AuditEvent.detail).where(
        col(AuditEvent.request_id) == request_id,
        col(AuditEvent.kind) == kind,
        col(AuditEvent.actor) == actor,
    )
    return list(session.exec(stmt).all())


def pending_in_session(session: Session, session_id: str, submitted_by: str | None) -> list[str]:
    """The ids of the pending requests of agent session `session_id` (of `submitted_by`'s
    only, when given)."""
    stmt = select(ConfirmationRequest.id).where(
        col(ConfirmationRequest.session_id) == session_id,
        col(ConfirmationRequest.status) == RequestStatus.pending,
    )
    if submitted_by is not None:
        stmt = stmt.where(col(ConfirmationRequest.submitted_by) == submitted_by)
    return list(session.exec(stmt).all())
