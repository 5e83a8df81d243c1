"""The audit trail: append-only events per request, each chained to the one before.

Every event carries `prev_hash` (the previous event's `chain_hash` for the same request) and
its own `chain_hash` = sha256 over its content and `prev_hash`, so changing or deleting any
event breaks the chain from there on (`gate audit verify`, the web page's chain check).
Events are written in the caller's transaction, beside the change they record, and so are
the `[[webhooks]]` messages they owe (`gate.decisions.webhook_events`).

Most events record a change; `revealed` records that a person saw a masked value of the call
(`gate.web.reveal`): who, when, and which value by its JSON pointer, never the value itself.
What an approver revealed is what their approval on the request page may count for
(`gate.decisions.acting.approval_refusal`).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sqlmodel import Session

from gate.asking.binding import canonical_json
from gate.base.statuses import RequestStatus
from gate.decisions import webhook_events
from gate.store import decisions as store
from gate.store import trail as trail_reads
from gate.store.db import Database
from gate.store.records import UNREAD
from gate.store.tables import AuditEvent

#: the kind of event that records a masked value shown to an approver
REVEALED = "revealed"
#: the kind of event that records a click a rule refused (an email-bound chat identity)
REFUSED = "click_refused"


def append(
    session: Session,
    request_id: str,
    kind: str,
    actor: str | None,
    via: str | None,
    now: datetime,
    detail: dict[str, object],
    *,
    first: bool = False,
    prev: Any = UNREAD,
) -> str:
    """Append one event to `request_id`'s chain, in the caller's transaction; returns its
    chain hash (the new head).

    `first` says the request has no event yet (it is being created), so there is no chain
    head to read; `prev` passes a head the caller read in this transaction already (for
    the same request, under its lock), so it is not read again.
    """
    if first:
        prev = None
    elif prev is UNREAD:
        prev = store.audit_head(session, request_id)
    kept = {k: v for k, v in detail.items() if v is not None}
    chain = chain_hash(request_id, now, kind, actor, via, kept, prev)
    values = {"request_id": request_id, "at": now, "kind": kind, "actor": actor, "via": via}
    values |= {"detail": kept, "prev_hash": prev, "chain_hash": chain}
    store.append_event(session, values)
    webhook_events.owe(
        session,
        request_id=request_id,
        kind=kind,
        actor=actor,
        via=via,
        at=now,
        detail=kept,
        chain_hash=chain,
        prev_hash=prev,
    )
    return chain


def chain_hash(
    request_id: str,
    at: datetime,
    kind: str,
    actor: str | None,
    via: str | None,
    detail: dict[str, Any],
    prev: str | None,
) -> str:
    """sha256 over one event's content and the previous event's hash."""
    body = {
        "request_id": request_id,
        "at": at.astimezone(UTC).isoformat(),
        "kind": kind,
        "actor": actor,
        "via": via,
        "detail": detail,
        "prev": prev,
    }
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


def audit_hash(event: AuditEvent) -> str:
    """The chained hash of one stored audit event: its content plus the previous event's hash."""
    return chain_hash(
        event.request_id,
        event.at,
        event.kind,
        event.actor,
        event.via,
        event.detail,
        event.prev_hash,
    )


def record(
    session: Session,
    *,
    request_id: str,
    kind: str,
    actor: str | None,
    via: str | None,
    now: datetime,
    detail: dict[str, object] | None = None,
    first: bool = False,
    prev: Any = UNREAD,
) -> str:
    """Append an audit event that is not a status change (created, card sent, ...)."""
    return append(session, request_id, kind, actor, via, now, detail or {}, first=first, prev=prev)


def trail(db: Database, request_id: str) -> list[AuditEvent]:
    """A request's events, oldest first, with their chain hashes."""
    with db.read() as session:
        return trail_reads.events_of(session, request_id)


def verify(db: Database) -> list[str]:
    """Recompute every request's chain; return one line per broken link (none: intact)."""
    problems: list[str] = []
    with db.read() as session:
        events = trail_reads.every_event(session)
        prev_by_request: dict[str, str | None] = {}
        for event in events:
            where = f"{event.request_id} event {event.id} ({event.kind})"
            if event.prev_hash != prev_by_request.get(event.request_id):
                problems.append(f"{where}: prev_hash does not match the previous event")
            if event.chain_hash != audit_hash(event):
                problems.append(f"{where}: content does not match its hash (edited after the fact)")
            prev_by_request[event.request_id] = event.chain_hash
    return problems


def record_reveal(
    session: Session, request_id: str, *, actor: str, via: str, path: str, now: datetime
) -> bool:
    """Record, under the request's lock, that `actor` revealed the masked value at `path`;
    False (nothing written) when the request is no longer pending or its deadline passed."""
    req = store.load(session, request_id, lock=True)
    if req is None or req.status != RequestStatus.pending or req.expires_at <= now:
        return False
    record(
        session,
        request_id=request_id,
        kind=REVEALED,
        actor=actor,
        via=via,
        now=now,
        detail={"path": path},
        prev=req.audit_head,
    )
    return True


def record_refusal(
    session: Session,
    request_id: str,
    *,
    actor: str,
    via: str,
    now: datetime,
    detail: dict[str, object],
) -> None:
    """Record, under the request's lock, a click a rule refused (`REFUSED`, with the refusal's
    code, words and the clicker's authentication); nothing when the request is gone."""
    req = store.load(session, request_id, lock=True)
    if req is None:
        return
    record(
        session,
        request_id=request_id,
        kind=REFUSED,
        actor=actor,
        via=via,
        now=now,
        detail=detail,
        prev=req.audit_head,
    )


def revealed(db: Database, request_id: str, actor: str) -> frozenset[str]:
    """The masked values (JSON pointers) `actor` revealed on `request_id`."""
    with db.read() as session:
        details = trail_reads.details_of(session, request_id, REVEALED, actor)
    return frozenset(str(d.get("path")) for d in details if isinstance(d, dict))


def created_detail(
    rule: str, trail: tuple[str, ...], justification: str | None, policy_revision: str
) -> dict[str, object]:
    """A request's `created` event detail: its rule and the policy revision that decided,
    policy's trail and the agent's justification (kept in the trail with the request it
    came with)."""
    detail: dict[str, object] = {
        "rule": rule,
        "policy_revision": policy_revision,
        "trail": list(trail),
    }
    return detail | ({"justification": justification} if justification else {})
