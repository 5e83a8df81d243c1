"""The request state machine: the ONLY code that changes a request's status.

    pending --approve (quorum reached)--> approved
            --reject--------------------> rejected
            --deadline passed-----------> expired   (or approved when on_timeout = "approve")
            --cancel--------------------> cancelled

Every transition is one compare-and-set UPDATE (`... WHERE id = :id AND status = 'pending'`)
whose row count is checked, so double clicks, retries, a second replica and the expiry sweep
can race freely: exactly one wins, the others get `AlreadyFinal`. The audit row and the
outbox rows that refresh posted cards are written in the same transaction, which the
caller (a use case in gate.service) owns: these functions add and flush, never commit.

Votes for quorum first lock the request row (`SELECT ... FOR UPDATE` on PostgreSQL; on
SQLite the writer's `BEGIN IMMEDIATE` already serialises writers), so two approvers voting at
the same instant are counted one after the other and the second sees the first's vote.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from gate import outbox
from gate.models import AuditEvent, ConfirmationRequest, RequestStatus, Verdict, Vote
from gate.views import SURFACE_NAMES


@dataclass(frozen=True)
class Changed:
    """The request moved to `status` in this transaction."""

    request_id: str
    status: RequestStatus


@dataclass(frozen=True)
class Voted:
    """The vote counted but quorum is not reached yet; the request stays pending."""

    request_id: str
    approvals: int
    required: int


@dataclass(frozen=True)
class AlreadyFinal:
    """The request had already finished; nothing changed."""

    request_id: str
    status: RequestStatus
    decided_by: str | None
    decided_at: datetime | None
    decided_via: str | None


@dataclass(frozen=True)
class AlreadyVoted:
    """This approver had already cast this verdict; it is not counted twice."""

    request_id: str
    approver: str
    verdict: Verdict


@dataclass(frozen=True)
class Missing:
    """No request has that id."""

    request_id: str


Outcome = Changed | Voted | AlreadyFinal | AlreadyVoted | Missing


def record_vote(
    session: Session,
    *,
    request_id: str,
    approver: str,
    verdict: Verdict,
    comment: str | None,
    via: str,
    now: datetime,
) -> Outcome:
    """Count one approver's verdict; approve on quorum, reject on any reject."""
    req = session.exec(
        select(ConfirmationRequest).where(ConfirmationRequest.id == request_id).with_for_update()
    ).first()
    if req is None:
        return Missing(request_id)
    if req.status != RequestStatus.pending:
        return _already_final(req)
    existing = session.exec(
        select(Vote).where(Vote.request_id == request_id, Vote.approver == approver)
    ).first()
    if existing is not None and existing.verdict == verdict:
        return AlreadyVoted(request_id, approver, verdict)
    if existing is None:
        session.add(
            Vote(
                request_id=request_id,
                approver=approver,
                verdict=verdict,
                comment=comment,
                via=via,
                at=now,
            )
        )
    else:  # an approver who approved towards a quorum and now rejects changes their vote
        existing.verdict, existing.comment, existing.via, existing.at = verdict, comment, via, now
        session.add(existing)
    session.flush()

    if verdict == Verdict.reject:
        reason = _decision_reason("Rejected", approver, via, comment)
        return _transition(
            session,
            req,
            RequestStatus.rejected,
            now=now,
            by=approver,
            via=via,
            reason=reason,
            detail={"comment": comment},
        )

    approvals = count_votes(session, request_id)
    if approvals < req.approvals_required:
        _audit(
            session,
            request_id,
            "vote",
            approver,
            via,
            now,
            {
                "verdict": verdict.value,
                "comment": comment,
                "approvals": approvals,
                "required": req.approvals_required,
            },
        )
        outbox.enqueue_updates(session, request_id, now)
        return Voted(request_id, approvals, req.approvals_required)
    reason = _decision_reason("Approved", approver, via, comment)
    return _transition(
        session,
        req,
        RequestStatus.approved,
        now=now,
        by=approver,
        via=via,
        reason=reason,
        detail={"comment": comment, "approvals": approvals},
    )


def expire(session: Session, *, request_id: str, now: datetime) -> Outcome:
    """Apply the request's deadline: expire it, or approve it when on_timeout says so."""
    req = session.get(ConfirmationRequest, request_id)
    if req is None:
        return Missing(request_id)
    if req.status != RequestStatus.pending:
        return _already_final(req)
    waited = _humanise(req.expires_at - req.created_at)
    rule = f" (rule {req.rule!r})" if req.rule else ""
    if req.on_timeout == "approve":
        reason = (
            f"Nobody answered within {waited}{rule}; the rule approves on timeout, "
            "so the call may run."
        )
        return _transition(
            session,
            req,
            RequestStatus.approved,
            now=now,
            by="gate",
            via="timeout",
            reason=reason,
            detail={"on_timeout": "approve"},
        )
    reason = (
        f"Nobody answered within {waited}{rule}, so the call was not run. "
        "No human rejected it: ask the user whether to try again later."
    )
    return _transition(
        session,
        req,
        RequestStatus.expired,
        now=now,
        by=None,
        via="timeout",
        reason=reason,
        detail={"on_timeout": "reject"},
    )


def cancel(
    session: Session, *, request_id: str, actor: str, via: str, why: str | None, now: datetime
) -> Outcome:
    """Withdraw a pending request (the agent gave up, or its session ended)."""
    req = session.get(ConfirmationRequest, request_id)
    if req is None:
        return Missing(request_id)
    if req.status != RequestStatus.pending:
        return _already_final(req)
    reason = f"Cancelled by {actor}" + (f": {why}" if why else "")
    return _transition(
        session,
        req,
        RequestStatus.cancelled,
        now=now,
        by=actor,
        via=via,
        reason=reason,
        detail={"why": why},
    )


def _transition(
    session: Session,
    req: ConfirmationRequest,
    to: RequestStatus,
    *,
    now: datetime,
    by: str | None,
    via: str,
    reason: str,
    detail: dict[str, object],
) -> Outcome:
    result = session.execute(
        sa.update(ConfirmationRequest)
        .where(
            col(ConfirmationRequest.id) == req.id,
            col(ConfirmationRequest.status) == RequestStatus.pending,
        )
        .values(status=to, decided_at=now, decided_by=by, decided_via=via, reason=reason)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        session.refresh(req)
        return _already_final(req)
    _audit(session, req.id, to.value, by, via, now, {**detail, "reason": reason})
    outbox.enqueue_updates(session, req.id, now)
    session.refresh(req)
    return Changed(req.id, to)


def _already_final(req: ConfirmationRequest) -> AlreadyFinal:
    return AlreadyFinal(
        req.id, RequestStatus(req.status), req.decided_by, req.decided_at, req.decided_via
    )


def _audit(
    session: Session,
    request_id: str,
    kind: str,
    actor: str | None,
    via: str | None,
    now: datetime,
    detail: dict[str, object],
) -> None:
    session.add(
        AuditEvent(
            request_id=request_id,
            at=now,
            kind=kind,
            actor=actor,
            via=via,
            detail={k: v for k, v in detail.items() if v is not None},
        )
    )
    session.flush()


def audit(
    session: Session,
    *,
    request_id: str,
    kind: str,
    actor: str | None,
    via: str | None,
    now: datetime,
    detail: dict[str, object] | None = None,
) -> None:
    """Append an audit event that is not a status change (created, card sent, ...)."""
    _audit(session, request_id, kind, actor, via, now, detail or {})


def _decision_reason(verb: str, approver: str, via: str, comment: str | None) -> str:
    surface = SURFACE_NAMES.get(via, via)
    text = f"{verb} by {approver} in {surface}"
    if comment:
        return f"{text}: {comment}"
    return text + (" (no reason given)" if verb == "Rejected" else "")


def _humanise(delta: object) -> str:
    seconds = int(getattr(delta, "total_seconds", lambda: 0)())
    if seconds % 3600 == 0 and seconds >= 3600:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0 and seconds >= 60:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def count_votes(session: Session, request_id: str) -> int:
    """Approve votes cast so far on a request."""
    return session.exec(
        select(func.count())
        .select_from(Vote)
        .where(col(Vote.request_id) == request_id, col(Vote.verdict) == Verdict.approve)
    ).one()
