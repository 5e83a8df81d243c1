"""The request state machine: the ONLY code that changes a request's status.

    pending --approve (quorum reached)--> approved
            --reject--------------------> rejected
            --deadline passed-----------> expired   (or approved when on_timeout = "approve")
            --cancel--------------------> cancelled

Every transition is one compare-and-set UPDATE (`... WHERE id = :id AND status = 'pending'`)
whose row count is checked (made sure by a row lock, or by `gate_require` in its statement),
so double clicks, retries, a second replica and the sweep race freely: exactly one wins, the
others get `AlreadyFinal`. The audit row and the outbox rows that refresh posted cards are
written in the same transaction, which the caller (a use case in gate.service) owns.

Votes for quorum first lock the request row (`SELECT ... FOR UPDATE` on PostgreSQL; on
SQLite the writer's `BEGIN IMMEDIATE` already serialises writers), so two approvers voting at
the same instant are counted one after the other and the second sees the first's vote.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col

from gate import audit, outbox, reasons
from gate.binding import argument_diff, canonical_json
from gate.models import ConfirmationRequest, Grant, GrantStatus, RequestStatus, Verdict

# re-exported: callers write machine.Changed, machine.AlreadyFinal, ...
from gate.outcomes import AlreadyFinal, AlreadyVoted, Changed, Extended, Missing, Outcome, Voted
from gate.store import batch, direct, rows

__all__ = ["AlreadyFinal", "AlreadyVoted", "Changed", "Extended", "Missing", "Outcome", "Voted"]
__all__ += ["lock", "record_vote", "expire", "cancel", "extend", "record_outcome"]
__all__ += ["allow_by_grant", "end_grant"]


def lock(
    session: Session, request_id: str, *, optimistic: bool = False
) -> tuple[rows.RequestRow, list[rows.VoteRow]] | None:
    """The request, locked for this transaction, and its votes: all a decision reads.

    PostgreSQL takes the row lock (`FOR UPDATE`) first; the votes and the audit chain's head
    are read by a later statement, so they are as of after the lock (a vote that committed
    while this one waited for the lock is seen). On SQLite the writer's `BEGIN IMMEDIATE`
    already serialises writers. None when no request has that id.

    A pending request one approval decides has no votes: its first vote, either way, ends
    it. So only its row is read, and the head comes back with the compare-and-set that
    ends it (`_transition`): every event of a pending request is written under its lock,
    so that statement, which begins after the lock was taken, sees the newest. Otherwise
    the votes and the head are read at once (`audit_head` on the row).

    `optimistic` (PostgreSQL): the row is read without its lock, outside the transaction.
    A finished request cannot change any more, and a pending one that one approval decides
    is changed only if its compare-and-set finds it as read (`rows.checked_cas_of`; the
    caller decides again with the lock when it does not, `batch.Unmet`). A quorum's votes
    are counted under the lock, so that row is read again with it."""
    req = rows.read(session, request_id, lock=True, optimistic=optimistic)
    if req is None:
        return None
    if req.status == RequestStatus.pending and req.approvals_required == 1:
        return req, []
    if req.optimistic and req.status == RequestStatus.pending:
        return lock(session, request_id)
    votes, req.audit_head = rows.votes_and_head(session, request_id, outside=req.optimistic)
    return req, votes


def record_vote(
    session: Session,
    req: rows.RequestRow,
    votes: list[rows.VoteRow],
    *,
    approver: str,
    verdict: Verdict,
    comment: str | None,
    via: str,
    now: datetime,
    edited_args: dict[str, Any] | None = None,
    grant: tuple[str, int] | None = None,
) -> Outcome:
    """Count one approver's verdict on a request `lock` returned; approve on quorum, reject
    on any reject. `votes` is kept up to date, so the caller can show the result unread.

    `edited_args` (approve only) replaces the arguments the call will run with (the audit
    records the difference); `grant` is the (scope, seconds) chosen with the approval. A
    request past its deadline takes no vote: the deadline is applied here instead.
    """
    if req.status != RequestStatus.pending:
        return _already_final(req)
    if req.expires_at <= now:
        expire(session, request_id=req.id, now=now, req=req)
        return _already_final(req)
    vote = rows.VoteRow(
        id=None,
        request_id=req.id,
        approver=approver,
        verdict=verdict.value,
        comment=comment,
        via=via,
        at=now,
        grant_scope=grant[0] if grant else None,
        grant_seconds=grant[1] if grant else None,
    )
    if not _cast(session, votes, vote):
        return AlreadyVoted(req.id, approver, verdict)
    if verdict == Verdict.reject:
        reason = reasons.decision("Rejected", approver, via, comment)
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
    approvals = sum(v.verdict == Verdict.approve for v in votes)
    if approvals < req.approvals_required:
        detail: dict[str, object] = {"verdict": verdict.value, "comment": comment}
        detail |= {"approvals": approvals, "required": req.approvals_required}
        req.audit_head = audit.append(
            session, req.id, "vote", approver, via, now, detail, prev=req.audit_head
        )
        outbox.enqueue_updates(session, req.id, now)
        return Voted(req.id, approvals, req.approvals_required)
    return _approve(session, req, vote, approvals, edited_args)


def _cast(session: Session, votes: list[rows.VoteRow], vote: rows.VoteRow) -> bool:
    """Store `vote` (and add it to `votes`); False when this approver had already cast the
    same verdict. An approver who approved towards a quorum and now rejects changes their
    vote."""
    existing = next((v for v in votes if v.approver == vote.approver), None)
    if existing is not None and existing.verdict == vote.verdict:
        return False
    if existing is None:
        batch.write(session, rows.INSERT_VOTE, {k: v for k, v in vars(vote).items() if k != "id"})
        votes.append(vote)
        return True
    changed = {"verdict": vote.verdict, "comment": vote.comment, "via": vote.via, "at": vote.at}
    changed |= {"grant_scope": None, "grant_seconds": None}
    existing.__dict__.update(changed)
    batch.write(session, rows.UPDATE_VOTE, {"vote_id": existing.id, **changed})
    return True


def _approve(
    session: Session,
    req: rows.RequestRow,
    vote: rows.VoteRow,
    approvals: int,
    edited_args: dict[str, Any] | None,
) -> Outcome:
    """The vote that reached quorum approves the request (with its edits, if any)."""
    edits = argument_diff(req.tool_args, edited_args) if edited_args is not None else {}
    verb = "Approved with edits" if edits else "Approved"
    reason = reasons.decision(verb, vote.approver, vote.via, vote.comment)
    if edits:
        reason += " Changed: " + "; ".join(
            f"{key} {canonical_json(d['from'])} -> {canonical_json(d['to'])}"
            for key, d in edits.items()
        )
    return _transition(
        session,
        req,
        RequestStatus.approved,
        now=vote.at,
        by=vote.approver,
        via=vote.via,
        reason=reason,
        detail={"comment": vote.comment, "approvals": approvals, "edits": edits or None},
        values={"approved_args": edited_args} if edits else None,
        before=vote.at,
    )


def expire(
    session: Session, *, request_id: str, now: datetime, req: rows.RequestRow | None = None
) -> Outcome:
    """Apply the request's deadline: expire it, or approve it when on_timeout says so.

    `req` is the row when the caller has it already (it is updated in place). A deadline
    moved past `now` since the caller found it due (an approver extended it) stands, and so
    does one moved between this read and the write: the compare-and-set ends the request
    only while its deadline is the one read here (`deadline`)."""
    req = req or rows.read(session, request_id)
    if req is None:
        return Missing(request_id)
    if req.status != RequestStatus.pending:
        return _already_final(req)
    if req.expires_at > now:
        return Extended(req.id, req.expires_at)
    waited = reasons.humanise(req.expires_at - req.created_at)
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
            deadline=req.expires_at,
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
        deadline=req.expires_at,
    )


def cancel(
    session: Session, *, request_id: str, actor: str, via: str, why: str | None, now: datetime
) -> Outcome:
    """Withdraw a pending request (the agent gave up, or its session ended)."""
    req = rows.read(session, request_id)
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
    req: rows.RequestRow,
    to: RequestStatus,
    *,
    now: datetime,
    by: str | None,
    via: str,
    reason: str,
    detail: dict[str, object],
    values: dict[str, Any] | None = None,
    before: datetime | None = None,
    deadline: datetime | None = None,
) -> Outcome:
    """Compare-and-set `req` from pending to `to`; with `before`, only while its deadline is
    still after that instant (a person's approval never lands on an expired request); with
    `deadline` (an expiry), only while the deadline is still that one."""
    written = {"status": to.value, "decided_at": now, "decided_by": by, "decided_via": via}
    written |= {"reason": reason, **(values or {})}
    params = {**written, "req_id": req.id}
    guard: rows.Guard = ""
    if before is not None:
        params["before"], guard = before, "before"
    elif deadline is not None:
        params["deadline"], guard = deadline, "deadline"
    if _compare_and_set(session, req, params, tuple(written), guard) != 1:
        rows.refresh(session, req)
        if req.status == RequestStatus.pending and guard == "deadline":
            # an extension committed between the expiry's read and its write: decided again
            # on the row as it is now (it stands unless that deadline passed too)
            return expire(session, request_id=req.id, now=now, req=req)
        if req.status == RequestStatus.pending:  # only the deadline guard stopped it
            expire(session, request_id=req.id, now=req.expires_at, req=req)
        return _already_final(req)
    req.audit_head = audit.append(
        session, req.id, to.value, by, via, now, {**detail, "reason": reason}, prev=req.audit_head
    )
    outbox.enqueue_updates(session, req.id, now)
    # The answer is built from what the UPDATE wrote: nothing is read back.
    req.__dict__.update(written)
    return Changed(req.id, to, req.tool_name, req.rule, by, via)


def _compare_and_set(
    session: Session,
    req: rows.RequestRow,
    params: dict[str, Any],
    written: tuple[str, ...],
    guard: rows.Guard,
) -> int:
    """`_transition`'s compare-and-set; returns the rows it changed (1 or 0). A row this
    transaction locked (PostgreSQL, `rows.read`) cannot change before it ends: pending and
    in time, the change is sure, so it rides with the trailing writes (`gate.store.batch`). So
    does one read optimistically, whose statement fails instead when it is not sure."""
    sure = req.locked and req.status == RequestStatus.pending  # locked: its head was read
    in_time = guard != "before" or req.expires_at > params["before"]
    in_time &= guard != "deadline" or req.expires_at == params["deadline"]
    if (sure or req.optimistic) and in_time and batch.holding(session):
        if sure:
            batch.write(session, rows.cas_of(written, guard), params)
        else:  # the statement fails unless the row and its head are as read (see `lock`)
            checked = rows.checked_cas_of(written, guard)
            batch.write(session, checked, {**params, "head": req.audit_head}, required=True)
        return 1
    conn = session.connection()
    if req.audit_head is not rows.UNREAD and not req.optimistic:  # its head was read under a lock
        return int(direct.execute(conn, rows.CAS[guard], params).rowcount)
    batch.before_reading(session, rows.AUDIT)  # the head comes back with the change (see `lock`)
    # the rows returned are the rows changed (SQLite's row count is not, with RETURNING)
    changed = direct.execute(conn, rows.CAS_HEAD[conn.dialect.name, guard], params).all()
    req.audit_head = changed[0].head if changed else req.audit_head
    return len(changed)


def _already_final(req: rows.RequestRow) -> AlreadyFinal:
    return AlreadyFinal(
        req.id, RequestStatus(req.status), req.decided_by, req.decided_at, req.decided_via
    )


def extend(
    session: Session,
    *,
    request_id: str,
    until: datetime,
    actor: str,
    via: str,
    now: datetime,
    seen: datetime | None = None,
) -> Outcome:
    """Move a pending request's deadline (approvers asking for more time).

    A deadline that has already passed cannot be moved: the request is expired here instead.
    With `seen` (the deadline the person was shown), it moves only from that deadline, so a
    click delivered again, to any replica, extends once.
    """
    guards = [
        col(ConfirmationRequest.id) == request_id,
        col(ConfirmationRequest.status) == RequestStatus.pending,
        col(ConfirmationRequest.expires_at) > now,
    ]
    if seen is not None:
        guards.append(col(ConfirmationRequest.expires_at) == seen)
    result = session.execute(
        sa.update(ConfirmationRequest)
        .where(*guards)
        .values(expires_at=until)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        req = rows.read(session, request_id)
        if req is None:
            return Missing(request_id)
        if req.status == RequestStatus.pending and req.expires_at > now:
            return Extended(request_id, req.expires_at)  # moved already, from what was seen
        if req.status == RequestStatus.pending:  # its deadline passed before the sweep ran
            expire(session, request_id=request_id, now=now, req=req)
        return _already_final(req)
    audit.append(session, request_id, "extended", actor, via, now, {"until": until.isoformat()})
    outbox.enqueue_updates(session, request_id, now)
    return Extended(request_id, until)


def record_outcome(
    session: Session,
    *,
    request_id: str,
    outcome: str,
    summary: str | None,
    actor: str,
    now: datetime,
) -> bool:
    """Record once what happened after approval ("ran", "failed", "not_run")."""
    result = session.execute(
        sa.update(ConfirmationRequest)
        .where(
            col(ConfirmationRequest.id) == request_id,
            col(ConfirmationRequest.status) == RequestStatus.approved,
            col(ConfirmationRequest.outcome).is_(None),
        )
        .values(outcome=outcome)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    audit.append(session, request_id, outcome, actor, "agent", now, {"summary": summary})
    return True


def allow_by_grant(session: Session, *, req: rows.RequestRow, grant: Any, now: datetime) -> None:
    """Record a call a grant let through: born approved, linked to the approval behind it.

    `req` is the request not yet written; `grant` the grant row `grants.find` returned."""
    until = f"{grant.expires_at:%Y-%m-%d %H:%M} UTC"
    req.status = RequestStatus.approved.value
    req.decided_at, req.decided_by, req.decided_via = now, grant.created_by, "grant"
    req.grant_id = grant.id
    req.reason = (
        f"Allowed by a grant from {grant.created_by} (scope: {grant.scope}, until "
        f"{until}), made when approving request {grant.request_id}."
    )
    rows.insert_request(session, req)
    batch.write(session, rows.USE_GRANT, {"grant_id": grant.id})
    req.audit_head = audit.append(
        session,
        req.id,
        "allowed_by_grant",
        grant.created_by,
        "grant",
        now,
        {"grant": grant.id, "approval": grant.request_id, "scope": grant.scope},
        first=True,
    )


def end_grant(
    session: Session, *, grant_id: str, to: GrantStatus, actor: str | None, now: datetime
) -> bool:
    """Revoke or expire an active grant (compare-and-set, like requests)."""
    result = session.execute(
        sa.update(Grant)
        .where(col(Grant.id) == grant_id, col(Grant.status) == GrantStatus.active)
        .values(status=to, ended_at=now, ended_by=actor)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    grant = session.get(Grant, grant_id)
    if grant is not None:
        # The event joins the approving request's chain: under that request's lock, as
        # every event of a request is, or an outcome reported at the same instant would
        # read the same head and fork the chain.
        rows.read(session, grant.request_id, lock=True)
        audit.append(
            session, grant.request_id, f"grant_{to.value}", actor, None, now, {"grant": grant_id}
        )
    return True
