"""Time-boxed grants: "approve, and allow the same for 30 minutes".

An approver attaches a grant to an approval, with a scope the rule offers: `call` (the same
tool with the same arguments), `pattern` (the same tool with the arguments the rule's
`grant_pin` names, and any more the approver chose, pinned to their approved values),
`session` (this tool in this agent session) or `agent` (this tool for this agent). A grant
lasts a time and, when counted, a number of uses (`max_grant_uses` caps it; 1 is
single-use). While it lasts, matching calls are let through at once and recorded as
requests born approved, linked to the approval that made the grant. Grants end by revocation,
by the expiry sweep, or as used up when their last use is taken; lookups also ignore any
grant whose time is up, so a slow sweep can never stretch one.

A grant never reaches further than the approval behind it: it covers only calls that match
the same rule with the same approvers and quorum, submitted by the same authenticated
principal (token) as the approved request, whatever agent or session ids a caller claims.
On a quorum rule, a grant is made only when every approving vote chose one, at the
narrowest scope and shortest duration among them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from gate.asking.binding import call_hash, canonical_json
from gate.base.errors import InvalidInput
from gate.base.statuses import GrantStatus, Verdict, new_id
from gate.config.settings import parse_duration
from gate.decisions import audit
from gate.store import grants as grant_rows
from gate.store.records import RequestRow, VoteRow

if TYPE_CHECKING:
    from gate.decisions.readmodel import RequestView

#: narrowest first: a call grant covers one argument object, a pattern grant the calls that
#: agree on its pinned arguments, a session or agent grant every call of the tool there
SCOPES = ("call", "pattern", "session", "agent")


@dataclass(frozen=True)
class GrantAsk:
    """A grant as a surface asks for it: scope, duration text, and optionally how many uses
    and which arguments (beyond the rule's `grant_pin`) a pattern grant pins."""

    scope: str
    duration: str
    uses: int | None = None
    pin: tuple[str, ...] = ()


@dataclass(frozen=True)
class GrantSpec:
    """What an approver asked for: a scope, how long, how many uses (None: no count) and,
    for a pattern grant, the arguments pinned."""

    scope: str
    duration: timedelta
    uses: int | None = None
    pin: tuple[str, ...] = ()

    def terms(self) -> dict[str, Any] | None:
        """What a vote keeps beyond scope and time (`Vote.grant_terms`), or None."""
        terms: dict[str, Any] = {}
        if self.uses is not None:
            terms["uses"] = self.uses
        if self.pin:
            terms["pin"] = list(self.pin)
        return terms or None


def validate(
    view: RequestView,
    scope: str,
    duration: str,
    *,
    uses: int | None = None,
    pin: tuple[str, ...] = (),
    args: dict[str, Any] | None = None,
) -> GrantSpec:
    """Check a requested grant against what the request's rule offers.

    `uses` defaults to the rule's `max_grant_uses` (None when it sets none); `pin` adds
    arguments to the rule's `grant_pin` for a pattern grant; `args` are the arguments the
    call will run with (the edited ones, if any), whose values a pattern grant pins."""
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
    return GrantSpec(scope, length, _uses(view, uses), _pin(view, scope, pin, args))


def _uses(view: RequestView, uses: int | None) -> int | None:
    cap = view.offers.max_grant_uses
    if uses is None:
        return cap
    if uses < 1:
        raise InvalidInput("a grant's uses must be 1 or more", code="invalid_input")
    if cap is not None and uses > cap:
        raise InvalidInput(
            f"a grant of {uses} uses is more than this rule allows ({cap})",
            code="grant_too_many_uses",
        )
    return uses


def _pin(
    view: RequestView, scope: str, pin: tuple[str, ...], args: dict[str, Any] | None
) -> tuple[str, ...]:
    if scope != "pattern":
        if pin:
            raise InvalidInput("only a pattern grant pins arguments", code="invalid_input")
        return ()
    names = tuple(dict.fromkeys((*view.offers.grant_pin, *pin)))
    present = view.tool_args if args is None else args
    missing = [name for name in names if name not in present]
    if missing:
        raise InvalidInput(
            f"a pattern grant pins arguments this call does not have: {', '.join(missing)}",
            code="grant_not_offered",
        )
    return names


def pattern_offered(view: RequestView) -> bool:
    """Whether a pattern grant can be made for this request: the rule offers one and the
    call has every argument the rule pins."""
    pinned = view.offers.grant_pin
    return "pattern" in view.offers.grant_scopes and all(n in view.tool_args for n in pinned)


def agreed(choices: list[GrantSpec | None]) -> GrantSpec | None:
    """The grant every approving vote agreed to: narrowest scope, shortest time, fewest
    uses, every argument any of them pinned; or None."""
    if not choices or any(c is None for c in choices):
        return None
    chosen = [c for c in choices if c is not None]
    scopes = {c.scope for c in chosen}
    # a pattern (any session, pinned arguments) and a session or agent grant (any arguments)
    # are not one inside the other: only the same call is inside both
    scope = "call" if "pattern" in scopes and scopes - {"pattern", "call"} else None
    scope = scope or min(scopes, key=SCOPES.index)
    counted = [c.uses for c in chosen if c.uses is not None]
    pin = tuple(dict.fromkeys(n for c in chosen for n in c.pin)) if scope == "pattern" else ()
    return GrantSpec(scope, min(c.duration for c in chosen), min(counted, default=None), pin)


def chosen(votes: list[VoteRow]) -> list[GrantSpec | None]:
    """The grant each approving vote chose (None where it chose none)."""
    return [
        GrantSpec(
            v.grant_scope,
            timedelta(seconds=v.grant_seconds),
            (v.grant_terms or {}).get("uses"),
            tuple((v.grant_terms or {}).get("pin") or ()),
        )
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
        "pinned": {name: args[name] for name in spec.pin} if spec.scope == "pattern" else None,
        "max_uses": spec.uses,
    }
    grant_rows.insert(session, values)
    detail: dict[str, object] = {
        "grant": grant_id,
        "scope": spec.scope,
        "until": expires_at.isoformat(),
        "uses": spec.uses,
        "pinned": list(spec.pin) or None,
    }
    req.audit_head = audit.record(
        session,
        request_id=req.id,
        kind="grant_created",
        actor=by,
        via=None,
        now=now,
        detail=detail,
        prev=req.audit_head,
    )
    return grant_id


def _agrees(pinned: dict[str, Any] | None, args: dict[str, Any]) -> bool:
    """Whether a call's arguments have each pinned value (compared as canonical JSON, so
    `true` never passes for `1`, nor `1.0` for `1`... as Python's == would)."""
    if not pinned:  # a pattern grant pins at least one argument; none would cover anything
        return False
    return all(
        name in args and canonical_json(args[name]) == canonical_json(value)
        for name, value in pinned.items()
    )


def find(
    session: Session,
    *,
    req: RequestRow,
    now: datetime,
    offered: tuple[str, ...],
    made_by_requester: Callable[[list[str]], bool],
) -> Iterator[Any]:
    """The active grant rows that cover the call `req` asks for (narrowest scope first): the
    caller lets the call through on the first whose use it can take (`machine.allow_by_grant`).

    `req` is the request about to be made: its rule, resolved approvers and quorum and its
    submitting principal must equal the grant's, and the rule must still offer the grant's
    scope (`offered`, from gate.toml now): taking a scope off a rule ends what standing
    grants of it cover, and a rule that offers none costs no query. A grant never covers a
    call one of the people who approved it asked for: `made_by_requester` is told who they
    were (`acting.approved_own`), read only for a grant that would cover the call.
    """
    if not offered:
        return
    keys = ("tool_name", "rule", "submitted_by", "approvals_required")
    params = {k: getattr(req, k) for k in keys}
    candidates = grant_rows.candidates(session, {**params, "now": now})
    if not candidates:
        return
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
                or (scope == "pattern" and _agrees(grant.pinned, req.tool_args))
                or (scope == "session" and session_id and grant.session_id == session_id)
                or (scope == "agent" and agent_id and grant.agent_id == agent_id)
            )
            if covers and not made_by_requester(grant_rows.approvers(session, grant.request_id)):
                yield grant


def uses_left(grant: Any) -> int | None:
    """How many more calls a grant may let through (None: not counted)."""
    if grant.max_uses is None:
        return None
    return max(0, int(grant.max_uses) - int(grant.uses))


# re-exported: what reads grants (the grant review page, the metrics) calls them from here
list_grants = grant_rows.list_grants
count_active = grant_rows.count_active
