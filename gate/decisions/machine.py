"""The request state machine: the ONLY code that changes a request's status.

    pending --approve (quorum reached)--> approved
            --reject--------------------> rejected
            --deadline passed-----------> expired   (or approved when on_timeout = "approve")
            --cancel--------------------> cancelled

Every transition is one compare-and-set (`store.compare_and_set`: the request moves only
while it is pending), so double clicks, retries, a second replica and the sweep race freely:
exactly one wins (`Won`), the others get `AlreadyFinal`. The audit event and the card
refreshes are written in the same transaction, which the caller (a use case in
gate.decisions.service) owns.

This module decides; it speaks no SQL. It reads and writes through the store's verbs
(`gate.store.decisions`), which choose each database's statements and carry the argument
for why they are correct (row locks, `BEGIN IMMEDIATE`, the one-statement batch).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlmodel import Session

from gate.asking.binding import argument_diff, canonical_json
from gate.base.statuses import GrantStatus, RequestStatus, Verdict
from gate.decisions import audit, reasons, voting
from gate.decisions.outcomes import (
    AlreadyFinal,
    AlreadyVoted,
    Changed,
    Extended,
    Missing,
    Outcome,
    Voted,
)
from gate.identity.authmethod import AuthMethod
from gate.policy import stages as chains
from gate.policy.offers import Offers
from gate.store import decisions as store
from gate.store.records import RequestRow, VoteRow


def lock(
    session: Session, request_id: str, *, optimistic: bool = False
) -> tuple[RequestRow, list[VoteRow]] | None:
    """The request and its votes, as of this transaction's lock: all a decision reads (None
    when no request has that id). `optimistic` (PostgreSQL) may read the row without its
    lock; a change built on it is then made only if nothing changed it meanwhile
    (`gate.store.decisions`, `CHANGED_MEANWHILE`)."""
    return store.load_for_decision(session, request_id, optimistic=optimistic)


def record_vote(
    session: Session,
    req: RequestRow,
    votes: list[VoteRow],
    *,
    approver: str,
    verdict: Verdict,
    comment: str | None,
    via: str,
    now: datetime,
    edited_args: dict[str, Any] | None = None,
    grant: tuple[str, int] | None = None,
    grant_terms: dict[str, Any] | None = None,
    own: bool = False,
    auth: AuthMethod | None = None,
) -> Outcome:
    """Count one approver's verdict on a request `lock` returned, in the stage whose turn it
    is: the stage's rejection threshold rejects (one, by default), its approvals either pass
    the request to the next stage or, in the last one, approve it. `votes` is kept up to
    date, so the caller can show the result unread.

    `edited_args` (approve only) replaces the arguments the call will run with (the audit
    records the difference); `grant` is the (scope, seconds) chosen with the approval and
    `grant_terms` its uses and pinned arguments (`GrantSpec.terms`); `own`
    marks a person deciding a call they asked for (a rule's `self_approval`); `auth` (how the
    approver was authenticated) is kept on the vote and in its audit event. A request past
    its deadline takes no vote: the deadline is applied here instead.
    """
    if req.status != RequestStatus.pending:
        return _already_final(req)
    if req.expires_at <= now:
        expire(session, request_id=req.id, now=now, req=req)
        return _already_final(req)
    vote = VoteRow(
        id=None, approver=approver, verdict=verdict.value, comment=comment, via=via, at=now
    )
    vote.grant_scope, vote.grant_seconds = grant or (None, None)
    vote.grant_terms = grant_terms
    vote.stage, vote.auth = req.stage, auth.to_json() if auth is not None else None
    cast, before = voting.cast(session, req, votes, vote)
    if not cast:
        return AlreadyVoted(req.id, approver, verdict)
    # a person's newest vote counts: a changed vote is in the trail
    extra = ({"self_approval": True} if own else {}) | _auth(vote)
    extra |= {"changed_from": before} if before is not None else {}
    return _counted(session, req, vote, votes, edited_args, extra)


def _counted(
    session: Session,
    req: RequestRow,
    vote: VoteRow,
    votes: list[VoteRow],
    edited_args: dict[str, Any] | None,
    extra: dict[str, object],
) -> Outcome:
    """What `vote`, just cast, does in the waiting stage: reject, count, pass the request to
    the next stage, or approve it."""
    offers = Offers.from_options(req.options)
    count = chains.tally(offers.stage(req.stage, req.approvals_required), req.stage, votes)
    if vote.verdict == Verdict.reject and count.rejected:
        reason = reasons.decision("Rejected", vote.approver, vote.via, vote.comment)
        detail = {"comment": vote.comment, **voting.stage_detail(offers, req, count), **extra}
        return _transition(
            session,
            req,
            RequestStatus.rejected,
            now=vote.at,
            by=vote.approver,
            via=vote.via,
            reason=reason,
            detail=detail,
        )
    if vote.verdict == Verdict.reject or not count.approved:
        return voting.counted(session, req, vote, offers, count, extra)
    if req.stage + 1 < len(offers.stages):
        return _advance(session, req, vote, votes, offers, count, extra)
    return _approve(session, req, vote, count, edited_args, extra)


def _advance(
    session: Session,
    req: RequestRow,
    vote: VoteRow,
    votes: list[VoteRow],
    offers: Offers,
    count: chains.Tally,
    extra: dict[str, object],
) -> Outcome:
    """The approval that completes a stage hands the request to the next one: its approvers,
    its threshold, its own deadline and escalation clock (a compare-and-set while the
    request is pending and in time, like every transition; the status stays pending)."""
    index, now = req.stage + 1, vote.at
    nxt = offers.stages[index]
    written: dict[str, Any] = {"stage": index, "stage_at": now, "approvers": list(nxt.approvers)}
    written |= {"approvals_required": nxt.approvals, "reminded_at": None, "escalated_at": None}
    # an acknowledgement was one stage's approver saying they are on it: the next stage's
    # approvers are reminded on their own clock until one of them says so
    written |= {"acknowledged_by": None, "acknowledged_at": None}
    written["expires_at"] = now + nxt.timeout if nxt.timeout is not None else req.expires_at
    written["nudge_at"] = offers.next_nudge(now, reminded=False, escalated=False, stage=index)
    won = store.compare_and_set(session, req, written, before=now)
    if isinstance(won, store.Lost):
        return _lost(session, req, now=now, deadline=None)
    done = count.stage.label(req.stage, len(offers.stages))
    by = chains.approvers_of(count.stage, req.stage, votes)
    detail: dict[str, object] = {"stage": done, "approved_by": by, "comment": vote.comment}
    detail |= {"next": nxt.label(index, len(offers.stages)), "approvers": list(nxt.approvers)}
    req.audit_head = audit.append(
        session,
        req.id,
        "stage_approved",
        vote.approver,
        vote.via,
        now,
        detail | extra,
        prev=won.head,
    )
    store.owe_card_updates(session, req.id, now)
    req.update(written)
    return Voted(req.id, count.approvals, count.stage.approvals, next_stage=str(detail["next"]))


def _auth(vote: VoteRow) -> dict[str, object]:
    """The audit detail saying how the voter was authenticated (none when not known)."""
    return {"auth": vote.auth} if vote.auth is not None else {}


def _approve(
    session: Session,
    req: RequestRow,
    vote: VoteRow,
    count: chains.Tally,
    edited_args: dict[str, Any] | None,
    extra: dict[str, object],
) -> Outcome:
    """The vote that reached the (last stage's) threshold approves the request (with its
    edits, if any)."""
    edits = argument_diff(req.tool_args, edited_args) if edited_args is not None else {}
    verb = "Approved with edits" if edits else "Approved"
    reason = reasons.decision(verb, vote.approver, vote.via, vote.comment)
    if edits:
        reason += " Changed: " + "; ".join(
            f"{key} {canonical_json(d['from'])} -> {canonical_json(d['to'])}"
            for key, d in edits.items()
        )
    detail = {"comment": vote.comment, "approvals": count.approvals, "edits": edits or None}
    return _transition(
        session,
        req,
        RequestStatus.approved,
        now=vote.at,
        by=vote.approver,
        via=vote.via,
        reason=reason,
        detail=detail | extra,
        values={"approved_args": edited_args} if edits else None,
        before=vote.at,
    )


def expire(
    session: Session, *, request_id: str, now: datetime, req: RequestRow | None = None
) -> Outcome:
    """Apply the request's deadline: expire it, or approve it when on_timeout says so.

    `req` is the row when the caller has it already (it is updated in place). A deadline
    moved past `now` since the caller found it due (an approver extended it) stands, and so
    does one moved between this read and the write: the compare-and-set ends the request
    only while its deadline is the one read here (`deadline`)."""
    req = req or store.load(session, request_id)
    if req is None:
        return Missing(request_id)
    if req.status != RequestStatus.pending:
        return _already_final(req)
    if req.expires_at > now:
        return Extended(req.id, req.expires_at)
    waited = reasons.humanise(req.expires_at - (req.stage_at or req.created_at))
    rule = f" (rule {req.rule!r})" if req.rule else ""
    stages = Offers.from_options(req.options).stages
    if stages:  # a chain's stage denies by itself: which one did not answer
        rule = f" ({stages[req.stage].label(req.stage, len(stages))} of rule {req.rule!r})"
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
    req = store.load(session, request_id)
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
    req: RequestRow,
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
    won = store.compare_and_set(session, req, written, before=before, deadline=deadline)
    if isinstance(won, store.Lost):
        return _lost(session, req, now=now, deadline=deadline)
    req.audit_head = audit.append(
        session, req.id, to.value, by, via, now, {**detail, "reason": reason}, prev=won.head
    )
    store.owe_card_updates(session, req.id, now)
    # The answer is built from what the compare-and-set wrote: nothing is read back.
    req.update(written)
    return Changed(req.id, to, req.tool_name, req.rule, by, via)


def _lost(
    session: Session, req: RequestRow, *, now: datetime, deadline: datetime | None
) -> Outcome:
    """After a compare-and-set another change won: `req` is the row as the winner left it."""
    if req.status == RequestStatus.pending and deadline is not None:
        # an extension committed between the expiry's read and its write: decided again
        # on the row as it is now (it stands unless that deadline passed too)
        return expire(session, request_id=req.id, now=now, req=req)
    if req.status == RequestStatus.pending:  # only the deadline guard stopped it
        expire(session, request_id=req.id, now=req.expires_at, req=req)
    return _already_final(req)


def _already_final(req: RequestRow) -> AlreadyFinal:
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
    if not store.move_deadline(session, request_id, until=until, now=now, seen=seen):
        req = store.load(session, request_id)
        if req is None:
            return Missing(request_id)
        if req.status == RequestStatus.pending and req.expires_at > now:
            return Extended(request_id, req.expires_at)  # moved already, from what was seen
        if req.status == RequestStatus.pending:  # its deadline passed before the sweep ran
            expire(session, request_id=request_id, now=now, req=req)
        return _already_final(req)
    audit.append(session, request_id, "extended", actor, via, now, {"until": until.isoformat()})
    store.owe_card_updates(session, request_id, now)
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
    if not store.set_outcome(session, request_id, outcome):
        return False
    audit.append(session, request_id, outcome, actor, "agent", now, {"summary": summary})
    return True


def allow_by_grant(session: Session, *, req: RequestRow, grant: Any, now: datetime) -> bool:
    """Record a call a grant let through: born approved, linked to the approval behind it;
    False, nothing written, when a counted grant's last use went to another call meanwhile.

    `req` is the request not yet written; `grant` a grant row `grants.find` returned. The
    last use of a counted grant ends it as used up, in the approving request's chain."""
    taken = None
    if grant.max_uses is not None:
        taken = store.take_grant_use(session, grant.id, now=now, used_up=GrantStatus.used_up)
        if taken is None:
            return False
    use = f"{taken[0]} of {taken[1]}" if taken else None
    req.status = RequestStatus.approved.value
    req.decided_at, req.decided_by, req.decided_via = now, grant.created_by, "grant"
    req.grant_id = grant.id
    req.reason = (
        f"Allowed by a grant from {grant.created_by} (scope: {grant.scope}, until "
        f"{grant.expires_at:%Y-%m-%d %H:%M} UTC{f', use {use}' if use else ''}), made when "
        f"approving request {grant.request_id}."
    )
    store.insert_request(session, req)
    if taken is None:
        store.use_grant(session, grant.id)
    detail = {"grant": grant.id, "approval": grant.request_id, "scope": grant.scope, "use": use}
    req.audit_head = audit.append(
        session, req.id, "allowed_by_grant", grant.created_by, "grant", now, detail, first=True
    )
    if taken is not None and taken[0] >= taken[1]:  # its last use: said where its making is
        head = store.lock_request(session, grant.request_id)
        used = {"grant": grant.id, "uses": taken[1], "last_use": req.id}
        audit.append(
            session, grant.request_id, "grant_used_up", None, "grant", now, used, prev=head
        )
    return True


def end_grant(
    session: Session, *, grant_id: str, to: GrantStatus, actor: str | None, now: datetime
) -> bool:
    """Revoke or expire an active grant (compare-and-set, like requests)."""
    ending = {"status": to, "ended_at": now, "ended_by": actor}
    ended, request_id = store.end_grant(session, grant_id, ending)
    if request_id is not None:  # the event joins the approving request's chain
        event = f"grant_{to.value}"
        audit.append(session, request_id, event, actor, None, now, {"grant": grant_id})
    return ended
