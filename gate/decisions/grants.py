"""Time-boxed grants: "approve, and allow the same for 30 minutes".

An approver attaches a grant to an approval, with a scope the rule offers: `call` (the same
tool with the same arguments), `session` (this tool in this agent session) or `agent` (this
tool for this agent). While it lasts, matching calls are let through at once and recorded as
requests born approved, linked to the approval that made the grant. Grants end by revocation
or by the expiry sweep; lookups also ignore any grant whose time is up, so a slow sweep can
never stretch one.

A grant never reaches further than the approval behind it: it covers only calls that match
the same rule with the same approvers and quorum, submitted by the same authenticated
principal (token) as the approved request, whatever agent or session ids a caller claims.
On a quorum rule, a grant is made only when every approving vote chose one, at the
narrowest scope and shortest duration among them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from gate.asking.binding import call_hash
from gate.base.errors import InvalidInput
from gate.base.statuses import GrantStatus, Verdict, new_id
from gate.config.settings import parse_duration
from gate.decisions import audit
from gate.store import grants as grant_rows
from gate.store.records import RequestRow, VoteRow

if TYPE_CHECKING:
    from gate.decisions.readmodel import RequestView

SCOPES = ("call", "session", "agent")


@dataclass(frozen=True)
class GrantSpec:
    """What an approver asked for: a scope and how long."""

    scope: str
    duration: timedelta


def validate(view: RequestView, scope: str, duration: str) -> GrantSpec:
    """Check a requested grant against what the request's rule offers."""
    offered = list(view.offers.grant_scopes)
    if scope not in offered:
        allowed = ", ".join(offered) if offered else "none"
        raise InvalidInput(
            f"this rule offers no {scope!r} grant (offered: {allowed})", code="grant_not_offered"
        )
    try:
        length = parse_duration(duration)
    except ValueError as exc:
        raise InvalidInput(f"grant duration: {exc}", code="invalid_input") from None
    cap = view.offers.max_grant.total_seconds()
    if length.total_seconds() > cap:
        raise InvalidInput(
            f"grant duration {duration} is longer than this rule allows ({int(cap // 60)}m)",
            code="grant_too_long",
        )
    if scope == "session" and not view.session_id:
        raise InvalidInput(
            "a session grant needs a request with a session_id", code="grant_not_offered"
        )
    if scope == "agent" and not view.agent_id:
        raise InvalidInput(
            "an agent grant needs a request with an agent_id", code="grant_not_offered"
        )
    return GrantSpec(scope, length)


def agreed(choices: list[GrantSpec | None]) -> GrantSpec | None:
    """The grant every approving vote agreed to: narrowest scope, shortest time; or None."""
    if not choices or any(c is None for c in choices):
        return None
    chosen = [c for c in choices if c is not None]
    scope = min((c.scope for c in chosen), key=SCOPES.index)
    return GrantSpec(scope, min(c.duration for c in chosen))


def chosen(votes: list[VoteRow]) -> list[GrantSpec | None]:
    """The grant each approving vote chose (None where it chose none)."""
    return [
        GrantSpec(v.grant_scope, timedelta(seconds=v.grant_seconds))
        if v.grant_scope and v.grant_seconds
        else None
        for v in votes
        if v.verdict == Verdict.approve
    ]


def create(session: Session, req: RequestRow, spec: GrantSpec, *, by: str, now: datetime) -> str:
    """Add the grant an approval carries, in the approving transaction; returns its id.

    `req` is the request row as the approval left it (its `audit_head` moves on)."""
    grant_id = new_id()
    expires_at = now + spec.duration
    args = req.approved_args if req.approved_args is not None else req.tool_args
    values = {
        "id": grant_id,
        "request_id": req.id,
        "rule": req.rule,
        "submitted_by": req.submitted_by,
        "approvers": sorted(req.approvers),
        "approvals_required": req.approvals_required,
        "tool_name": req.tool_name,
        "scope": spec.scope,
        "session_id": req.session_id if spec.scope == "session" else None,
        "agent_id": req.agent_id if spec.scope == "agent" else None,
        "args_hash": call_hash(req.tool_name, args) if spec.scope == "call" else None,
        "created_by": by,
        "created_at": now,
        "expires_at": expires_at,
        "status": GrantStatus.active.value,
        "uses": 0,
    }
    grant_rows.insert(session, values)
    req.audit_head = audit.record(
        session,
        request_id=req.id,
        kind="grant_created",
        actor=by,
        via=None,
        now=now,
        detail={"grant": grant_id, "scope": spec.scope, "until": expires_at.isoformat()},
        prev=req.audit_head,
    )
    return grant_id


def find(
    session: Session,
    *,
    req: RequestRow,
    now: datetime,
    offered: tuple[str, ...],
    made_by_requester: Callable[[list[str]], bool],
) -> Any | None:
    """The active grant row that covers the call `req` asks for, if any (narrowest scope
    first).

    `req` is the request about to be made: its rule, resolved approvers and quorum and its
    submitting principal must equal the grant's, and the rule must still offer the grant's
    scope (`offered`, from gate.toml now): taking a scope off a rule ends what standing
    grants of it cover, and a rule that offers none costs no query. A grant never covers a
    call one of the people who approved it asked for: `made_by_requester` is told who they
    were (`acting.approved_own`), read only for a grant that would cover the call.
    """
    if not offered:
        return None
    keys = ("tool_name", "rule", "submitted_by", "approvals_required")
    params = {k: getattr(req, k) for k in keys}
    candidates = grant_rows.candidates(session, {**params, "now": now})
    if not candidates:
        return None
    args_hash = call_hash(req.tool_name, req.tool_args)
    session_id, agent_id = req.session_id, req.agent_id
    approvers = sorted(req.approvers)
    for scope in SCOPES:
        if scope not in offered:
            continue
        for grant in candidates:
            if grant.scope != scope or sorted(grant.approvers) != approvers:
                continue
            covers = (
                (scope == "call" and grant.args_hash == args_hash)
                or (scope == "session" and session_id and grant.session_id == session_id)
                or (scope == "agent" and agent_id and grant.agent_id == agent_id)
            )
            if covers and not made_by_requester(grant_rows.approvers(session, grant.request_id)):
                return grant
    return None


# re-exported: what reads grants (the grant review page, the metrics) calls them from here
list_grants = grant_rows.list_grants
count_active = grant_rows.count_active
