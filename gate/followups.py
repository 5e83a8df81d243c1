"""Use cases around a request's life: remind, escalate, session end, outcome, grants, audit.

Each owns its transaction, like those in gate.service; status changes still go through
gate.machine.
"""

from __future__ import annotations

import logging
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import col, select

from gate import audit, grants, machine, outbox
from gate.auth import Principal
from gate.errors import Conflict
from gate.models import AuditEvent, ConfirmationRequest, Grant, GrantStatus, RequestStatus
from gate.offers import Offers
from gate.readmodel import RequestView
from gate.service import GateService

log = logging.getLogger(__name__)


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
    return service.get(request_id, principal)


def cancel_session(
    service: GateService, session_id: str, principal: Principal, why: str | None
) -> list[str]:
    """Cancel every pending request of an agent session (its session ended)."""
    principal.require("agent", "admin")
    with service.db.read() as session:
        stmt = select(ConfirmationRequest.id).where(
            col(ConfirmationRequest.session_id) == session_id,
            col(ConfirmationRequest.status) == RequestStatus.pending,
        )
        if principal.role == "agent":
            stmt = stmt.where(col(ConfirmationRequest.submitted_by) == principal.name)
        ids = list(session.exec(stmt).all())
    why = why or "the agent session ended"
    return [
        request_id
        for request_id in ids
        if isinstance(
            service.withdraw(request_id, actor=principal.name, via="agent", why=why),
            machine.Changed,
        )
    ]


def revoke_grant(service: GateService, grant_id: str, principal: Principal) -> Grant:
    """End a grant early. Approvers and admins may revoke."""
    principal.require("approver", "admin")
    with service.db.write() as session:
        grant = session.get(Grant, grant_id)
        if grant is None:
            from gate.errors import NotFound

            raise NotFound(f"no grant with id {grant_id!r}", code="grant_not_found")
        if not machine.end_grant(
            session,
            grant_id=grant_id,
            to=GrantStatus.revoked,
            actor=principal.actor_name,
            now=service.clock(),
        ):
            raise Conflict(f"grant {grant_id} already ended ({grant.status})", code="grant_ended")
        session.refresh(grant)
        return grant


def list_grants(service: GateService, principal: Principal, active_only: bool) -> list[Grant]:
    """Grants for approvers and admins to review."""
    principal.require("approver", "admin")
    with service.db.read() as session:
        return grants.list_grants(session, active_only=active_only, now=service.clock())


def audit_trail(service: GateService, request_id: str, principal: Principal) -> list[AuditEvent]:
    """The request's audit events with their chain hashes."""
    service.get(request_id, principal)
    with service.db.read() as session:
        return list(
            session.exec(
                select(AuditEvent)
                .where(AuditEvent.request_id == request_id)
                .order_by(col(AuditEvent.id))
            ).all()
        )


def remind_and_escalate(service: GateService, now: datetime) -> tuple[int, int]:
    """Remind approvers of requests waiting past `remind_after`; escalate past `escalate_after`.

    Each happens once per request: the marker columns are set with a compare-and-set, so
    every replica may run this job.
    """
    reminded = escalated = 0
    with service.db.read() as session:
        rows = list(
            session.exec(
                select(ConfirmationRequest).where(
                    col(ConfirmationRequest.status) == RequestStatus.pending,
                    sa.or_(
                        col(ConfirmationRequest.reminded_at).is_(None),
                        col(ConfirmationRequest.escalated_at).is_(None),
                    ),
                )
            ).all()
        )
    for req in rows:
        offers = Offers.from_options(req.options)
        remind = offers.remind_after
        if remind and req.reminded_at is None and now >= req.created_at + remind:
            reminded += _mark(service, req, "reminded_at", now, escalate=False)
        escalate = offers.escalate_after
        if escalate and req.escalated_at is None and now >= req.created_at + escalate:
            escalated += _mark(service, req, "escalated_at", now, escalate=True)
    return reminded, escalated


def _mark(
    service: GateService, req: ConfirmationRequest, column: str, now: datetime, *, escalate: bool
) -> int:
    with service.changing() as change:
        session = change.session
        result = session.execute(
            sa.update(ConfirmationRequest)
            .where(
                col(ConfirmationRequest.id) == req.id,
                col(ConfirmationRequest.status) == RequestStatus.pending,
                getattr(ConfirmationRequest, column).is_(None),
            )
            .values({column: now})
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            return 0
        detail: dict[str, object] = {}
        if escalate:
            offers = Offers.from_options(req.options)
            extra = service.policy.expand_approvers(list(offers.escalate_approvers))
            approvers = list(dict.fromkeys([*req.approvers, *extra])) if req.approvers else []
            session.execute(
                sa.update(ConfirmationRequest)
                .where(col(ConfirmationRequest.id) == req.id)
                .values(approvers=approvers)
            )
            pairs = [t.partition(":") for t in offers.escalate_to]
            targets = [(c, t) for c, _, t in pairs if c in service.configured_channels]
            outbox.enqueue_posts(session, req.id, targets, now)
            detail = {"approvers": extra, "channels": [f"{c}:{t}" for c, t in targets]}
        outbox.enqueue_updates(session, req.id, now)
        audit.record(
            session,
            request_id=req.id,
            kind="escalated" if escalate else "reminded",
            actor=None,
            via=None,
            now=now,
            detail=detail,
        )
        change.touched(req.id)
    log.info("request %s %s", req.id, "escalated" if escalate else "reminder sent")
    return 1


def verify_audit(service: GateService) -> list[str]:
    """Recompute every request's audit chain; return one line per broken link."""
    problems: list[str] = []
    with service.db.read() as session:
        events = session.exec(
            select(AuditEvent).order_by(col(AuditEvent.request_id), col(AuditEvent.id))
        ).all()
        prev_by_request: dict[str, str | None] = {}
        for event in events:
            expected_prev = prev_by_request.get(event.request_id)
            if event.prev_hash != expected_prev:
                problems.append(
                    f"{event.request_id} event {event.id} ({event.kind}): "
                    "prev_hash does not match the previous event"
                )
            if event.chain_hash != audit.audit_hash(event):
                problems.append(
                    f"{event.request_id} event {event.id} ({event.kind}): "
                    "content does not match its hash (edited after the fact)"
                )
            prev_by_request[event.request_id] = event.chain_hash
    return problems
