"""Reminders' and escalations' SQL (`gate.delivery.reminders` decides who is nudged and when)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col

from gate.base.statuses import RequestStatus
from gate.store.rows import REQUEST
from gate.store.tables import ConfirmationRequest

#: pending requests with a reminder or escalation due (`nudge_at`, on its index): a tick
#: reads nothing for the many requests whose rules remind nobody
_DUE = sa.select(
    REQUEST.c.id,
    REQUEST.c.created_at,
    REQUEST.c.options,
    REQUEST.c.approvers,
    REQUEST.c.reminded_at,
    REQUEST.c.escalated_at,
    REQUEST.c.stage,
    REQUEST.c.stage_at,
).where(
    REQUEST.c.status == RequestStatus.pending.value,
    REQUEST.c.nudge_at <= sa.bindparam("now"),
    # an approver said they are on it: nobody is nudged (`acknowledge` also clears nudge_at)
    REQUEST.c.acknowledged_at.is_(None),
)


def due(conn: sa.Connection, now: datetime) -> list[Any]:
    """The pending requests whose next nudge is due: only the columns a nudge needs (`id`,
    `created_at`, `options`, `approvers`, `reminded_at`, `escalated_at`, `stage`,
    `stage_at`)."""
    return list(conn.execute(_DUE, {"now": now}).all())


def set_next(conn: sa.Connection, request_id: str, when: datetime | None) -> None:
    """Store when a pending request is next due a nudge (None: never)."""
    conn.execute(
        sa.update(REQUEST)
        .where(REQUEST.c.id == request_id, REQUEST.c.status == RequestStatus.pending.value)
        .values(nudge_at=when)
    )


def mark(
    session: Session,
    request_id: str,
    column: str,
    now: datetime,
    then: datetime | None,
    *,
    stage: int = 0,
) -> bool:
    """Set the marker `column` ("reminded_at" or "escalated_at") to `now` and the next
    nudge to `then`, only while the request is pending, still in chain stage `stage` and
    the marker unset and nobody acknowledged it (compare-and-set: every replica runs the
    job, and a vote that passed the request to its next stage meanwhile wins: that stage
    has its own clock; so does an acknowledgement committed meanwhile); False
    when another got there first. The UPDATE holds the row until the commit, so a vote
    waits for the escalation's approvers (PostgreSQL) or comes after them (SQLite)."""
    result = session.execute(
        sa.update(ConfirmationRequest)
        .where(
            col(ConfirmationRequest.id) == request_id,
            col(ConfirmationRequest.status) == RequestStatus.pending,
            col(ConfirmationRequest.stage) == stage,
            getattr(ConfirmationRequest, column).is_(None),
            col(ConfirmationRequest.acknowledged_at).is_(None),
        )
        .values({column: now, "nudge_at": then})
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def set_approvers(session: Session, request_id: str, approvers: list[str]) -> None:
    """Replace who may decide the request (an escalation adds people)."""
    session.execute(
        sa.update(ConfirmationRequest)
        .where(col(ConfirmationRequest.id) == request_id)
        .values(approvers=approvers)
    )


def acknowledge(session: Session, request_id: str, actor: str, now: datetime) -> bool:
    """Record that `actor` is on the pending request and stop its nudges (`nudge_at` None),
    unless someone acknowledged it already (compare-and-set); False when no row matched.

    The UPDATE holds the row until the commit, like `mark`'s: an escalation running at the
    same time either committed first (and this acknowledgement follows it) or finds the
    request acknowledged and does nothing (`tests/delivery/test_acknowledge_race.py`)."""
    result = session.execute(
        sa.update(ConfirmationRequest)
        .where(
            col(ConfirmationRequest.id) == request_id,
            col(ConfirmationRequest.status) == RequestStatus.pending,
            col(ConfirmationRequest.acknowledged_at).is_(None),
        )
        .values(acknowledged_by=actor, acknowledged_at=now, nudge_at=None)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]
