"""Outgoing webhooks' outbox: messages owed in the deciding transaction, claimed with a lease.

A `webhook_delivery` row is one signed message owed to one `[[webhooks]]` receiver. It is
written by `owe` in the transaction of the change it reports (its audit event's), so a
change that commits always has its messages and one that rolls back never does. Every
replica's pump claims due rows with a lease (`claimed_until`), using `FOR UPDATE SKIP
LOCKED` on PostgreSQL so two replicas never claim the same row; a replica that dies
mid-send leaves the lease to run out and another sends the row. Marks are compare-and-set
on the lease, so a replica whose lease was retaken cannot mark the row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlmodel import Session
from ulid import ULID

from gate.base.statuses import DeliveryStatus
from gate.store import batch
from gate.store.tables import UTCDateTime, WebhookDelivery

if TYPE_CHECKING:
    from gate.store.db import Database

WEBHOOK: sa.Table = WebhookDelivery.__table__  # type: ignore[attr-defined]

#: a claim's lease: longer than the longest send (`WebhookSettings.timeout_seconds` is at most
#: 30 s, and a claimed batch is sent all at once), so a live replica never loses a row it is
#: sending, and a dead replica's rows are sent again within a minute
LEASE = timedelta(seconds=60)
#: rows one pump run claims (sent concurrently)
BATCH = 20
#: in `Session.info` (set by `Database.write`): webhook name -> the events it wants
SUBSCRIPTIONS = "gate_webhooks"
#: in `Session.info`: the transaction owes webhook messages (its pump can run once it commits)
_OWED = "gate_owes_webhooks"
#: the longest wait between two attempts
MAX_BACKOFF = timedelta(hours=1)


@dataclass(frozen=True)
class WebhookClaim:
    """A message this replica holds the lease on."""

    id: int
    msg_id: str
    webhook: str
    event: str
    request_id: str
    payload: dict[str, Any]
    #: attempts including the one under way
    attempts: int
    until: datetime


@dataclass(frozen=True)
class WebhookRow:
    """A message as the console lists it."""

    id: int
    msg_id: str
    webhook: str
    event: str
    request_id: str
    status: str
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    created_at: datetime
    sent_at: datetime | None


def subscribers(session: Session, event: str) -> list[str]:
    """The webhooks (by name) that want `event`, as configured for this session's database."""
    subscribed: dict[str, frozenset[str]] = session.info.get(SUBSCRIPTIONS) or {}
    return [name for name, events in subscribed.items() if event in events]


_INSERT = batch.insert(
    WEBHOOK,
    (
        "msg_id",
        "webhook",
        "event",
        "request_id",
        "payload",
        "status",
        "attempts",
        "next_attempt_at",
        "created_at",
    ),
)


def owe(
    session: Session,
    *,
    webhooks: list[str],
    event: str,
    request_id: str,
    payload: dict[str, Any],
    now: datetime,
) -> None:
    """Owe `payload` to each of `webhooks`, in the caller's transaction (with its batch)."""
    for name in webhooks:
        # One row per receiver, each its own message id: they succeed and fail apart.
        values = {
            "msg_id": f"msg_{ULID()}",
            "webhook": name,
            "event": event,
            "request_id": request_id,
            "payload": payload,
            "status": DeliveryStatus.pending.value,
            "attempts": 0,
            "next_attempt_at": now,
            "created_at": now,
        }
        batch.write(session, _INSERT, values)
        session.info[_OWED] = True


def owes_messages(session: Session) -> bool:
    """True when `session`'s transaction owed webhook messages."""
    return bool(session.info.get(_OWED))


_NOW = sa.bindparam("now", type_=UTCDateTime())
_DUE = (
    sa.select(WEBHOOK.c.id)
    .where(
        WEBHOOK.c.status == DeliveryStatus.pending.value,
        WEBHOOK.c.next_attempt_at <= _NOW,
        sa.or_(WEBHOOK.c.claimed_until.is_(None), WEBHOOK.c.claimed_until < _NOW),
    )
    .order_by(WEBHOOK.c.id)
    .limit(sa.bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_CLAIM = (
    sa.update(WEBHOOK)
    .where(WEBHOOK.c.id.in_(_DUE.scalar_subquery()))
    .values(
        claimed_until=sa.bindparam("until", type_=UTCDateTime()),
        attempts=WEBHOOK.c.attempts + 1,
    )
    .returning(
        WEBHOOK.c.id,
        WEBHOOK.c.msg_id,
        WEBHOOK.c.webhook,
        WEBHOOK.c.event,
        WEBHOOK.c.request_id,
        WEBHOOK.c.payload,
        WEBHOOK.c.attempts,
    )
)


def claim_due(db: Database, now: datetime, limit: int = BATCH) -> list[WebhookClaim]:
    """Take a lease on up to `limit` due messages (oldest first) and return them."""
    until = now + LEASE
    with db.write_conn() as conn:
        rows = conn.execute(_CLAIM, {"now": now, "until": until, "limit": limit}).all()
    claims = [
        WebhookClaim(
            id=row.id,
            msg_id=row.msg_id,
            webhook=row.webhook,
            event=row.event,
            request_id=row.request_id,
            payload=row.payload,
            attempts=row.attempts,
            until=until,
        )
        for row in rows
    ]
    return sorted(claims, key=lambda c: c.id)


def _held(claim: WebhookClaim) -> Any:
    """The WHERE of a mark: the row is still pending under this claim's lease."""
    return sa.and_(
        WEBHOOK.c.id == claim.id,
        WEBHOOK.c.status == DeliveryStatus.pending.value,
        WEBHOOK.c.claimed_until == claim.until,
    )


def mark_sent(db: Database, claim: WebhookClaim, now: datetime) -> bool:
    """Record that the receiver took the message; False when the lease was lost first."""
    done = {"status": DeliveryStatus.sent.value, "sent_at": now, "claimed_until": None}
    with db.write_conn() as conn:
        result = conn.execute(sa.update(WEBHOOK).where(_held(claim)).values(done))
    return bool(result.rowcount == 1)


def backoff(attempts: int, base: float) -> timedelta:
    """The wait after failed attempt number `attempts`: `base` doubled each time, capped."""
    wait = timedelta(seconds=base * 2 ** min(attempts - 1, 30))
    return min(wait, MAX_BACKOFF)


def mark_failed(
    db: Database, claim: WebhookClaim, now: datetime, error: str, *, max_attempts: int, base: float
) -> bool:
    """Record a failed attempt: due again after its backoff, or dead after `max_attempts`;
    returns whether it is dead."""
    dead = claim.attempts >= max_attempts
    values: dict[str, Any] = {"last_error": error[:500], "claimed_until": None}
    if dead:
        values["status"] = DeliveryStatus.dead.value
    else:
        values["next_attempt_at"] = now + backoff(claim.attempts, base)
    with db.write_conn() as conn:
        conn.execute(sa.update(WEBHOOK).where(_held(claim)).values(values))
    return dead


def resend(db: Database, row_id: int, now: datetime) -> WebhookRow | None:
    """Make a dead message due again now, with fresh attempts (the same `msg_id` and
    payload); None when there is no dead message with that id (sent, pending, or unknown)."""
    again = {"status": DeliveryStatus.pending.value, "attempts": 0, "next_attempt_at": now}
    statement = (
        sa.update(WEBHOOK)
        .where(WEBHOOK.c.id == row_id, WEBHOOK.c.status == DeliveryStatus.dead.value)
        .values(again | {"claimed_until": None})
        .returning(*_ROW_COLUMNS)
    )
    with db.write_conn() as conn:
        row = conn.execute(statement).first()
    return WebhookRow(*row) if row is not None else None


_ROW_COLUMNS = (
    WEBHOOK.c.id,
    WEBHOOK.c.msg_id,
    WEBHOOK.c.webhook,
    WEBHOOK.c.event,
    WEBHOOK.c.request_id,
    WEBHOOK.c.status,
    WEBHOOK.c.attempts,
    WEBHOOK.c.next_attempt_at,
    WEBHOOK.c.last_error,
    WEBHOOK.c.created_at,
    WEBHOOK.c.sent_at,
)


def recent(db: Database, *, limit: int = 100, status: str | None = None) -> list[WebhookRow]:
    """The newest messages first (only those in `status`, when given)."""
    statement = sa.select(*_ROW_COLUMNS).order_by(WEBHOOK.c.id.desc()).limit(limit)
    if status is not None:
        statement = statement.where(WEBHOOK.c.status == status)
    with db.read_conn() as conn:
        return [WebhookRow(*row) for row in conn.execute(statement)]


def backlog(db: Database) -> list[tuple[str, str, int]]:
    """(status, webhook, how many) of the messages not sent: pending and dead."""
    statement = (
        sa.select(WEBHOOK.c.status, WEBHOOK.c.webhook, sa.func.count())
        .where(WEBHOOK.c.status != DeliveryStatus.sent.value)
        .group_by(WEBHOOK.c.status, WEBHOOK.c.webhook)
    )
    with db.read_conn() as conn:
        return [(str(status), str(hook), int(n)) for status, hook, n in conn.execute(statement)]


def counts(db: Database) -> dict[str, int]:
    """Messages by status."""
    statement = sa.select(WEBHOOK.c.status, sa.func.count()).group_by(WEBHOOK.c.status)
    with db.read_conn() as conn:
        return {str(status): int(n) for status, n in conn.execute(statement)}
