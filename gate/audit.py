"""The audit trail: append-only events per request, each chained to the one before.

Every event carries `prev_hash` (the previous event's `chain_hash` for the same request) and
its own `chain_hash` = sha256 over its content and `prev_hash`, so changing or deleting any
event breaks the chain from there on (`gate audit verify`, the web page's chain check).
Events are written in the caller's transaction, beside the change they record.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from sqlmodel import Session, col, select

from gate.binding import canonical_json
from gate.db import Database
from gate.models import AuditEvent


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
) -> None:
    """Append one event to `request_id`'s chain, in the caller's transaction.

    `first` says the request has no event yet (it is being created), so there is no chain
    head to read.
    """
    prev = None
    if not first:
        prev = session.exec(
            select(AuditEvent.chain_hash)
            .where(AuditEvent.request_id == request_id)
            .order_by(col(AuditEvent.id).desc())
            .limit(1)
        ).first()
    event = AuditEvent(
        request_id=request_id,
        at=now,
        kind=kind,
        actor=actor,
        via=via,
        detail={k: v for k, v in detail.items() if v is not None},
        prev_hash=prev,
    )
    event.chain_hash = audit_hash(event)
    session.add(event)
    session.flush()


def audit_hash(event: AuditEvent) -> str:
    """The chained hash of one audit event: its content plus the previous event's hash."""
    body = {
        "request_id": event.request_id,
        "at": event.at.astimezone(UTC).isoformat(),
        "kind": event.kind,
        "actor": event.actor,
        "via": event.via,
        "detail": event.detail,
        "prev": event.prev_hash,
    }
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


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
) -> None:
    """Append an audit event that is not a status change (created, card sent, ...)."""
    append(session, request_id, kind, actor, via, now, detail or {}, first=first)


def trail(db: Database, request_id: str) -> list[AuditEvent]:
    """A request's events, oldest first, with their chain hashes."""
    with db.read() as session:
        return list(
            session.exec(
                select(AuditEvent)
                .where(col(AuditEvent.request_id) == request_id)
                .order_by(col(AuditEvent.id))
            ).all()
        )


def verify(db: Database) -> list[str]:
    """Recompute every request's chain; return one line per broken link (none: intact)."""
    problems: list[str] = []
    with db.read() as session:
        events = session.exec(
            select(AuditEvent).order_by(col(AuditEvent.request_id), col(AuditEvent.id))
        ).all()
        prev_by_request: dict[str, str | None] = {}
        for event in events:
            where = f"{event.request_id} event {event.id} ({event.kind})"
            if event.prev_hash != prev_by_request.get(event.request_id):
                problems.append(f"{where}: prev_hash does not match the previous event")
            if event.chain_hash != audit_hash(event):
                problems.append(f"{where}: content does not match its hash (edited after the fact)")
            prev_by_request[event.request_id] = event.chain_hash
    return problems
