"""The statements behind `gate.decisions.denials`: counting an agent's rejections, tripping and
resetting it, and the active trips every replica keeps in memory.

Nothing here runs on an un-gated call: the trip check of a call reads this replica's memory
(`gate.decisions.denials.Trips`). These run when a person rejects a call (`count_rejections`,
`trip`, in the rejection's own transaction), when a person resets an agent, and when a
replica (re)loads the active trips.

Two replicas rejecting calls of one agent at the same moment must not each count one
rejection short of the threshold: on PostgreSQL the count is taken under a transaction
advisory lock keyed by the agent, so the second waits for the first to commit and its count
(READ COMMITTED: a fresh snapshot per statement) includes the first's rejection. SQLite
has one writer at a time (`BEGIN IMMEDIATE`) already. The partial unique index
`uq_agent_trip_active` keeps one active trip per agent whatever happens.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session

from gate.base.statuses import RequestStatus
from gate.store import batch, rows
from gate.store.records import TripRow
from gate.store.tables import AgentTrip

TRIP: sa.Table = AgentTrip.__table__  # type: ignore[attr-defined]
_REQ = rows.REQUEST
#: the first key of the advisory lock (the agent's hash is the second): "ga"te, so gate's
#: locks do not meet another application's on a shared database
_LOCK_SPACE = 0x6761
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_AGENT = sa.bindparam("agent", type_=sa.String)
_FIELDS = (TRIP.c.agent, TRIP.c.reason, TRIP.c.request_id, TRIP.c.tripped_at)


def _of_agent() -> sa.ColumnElement[bool]:
    """Requests of the agent: its agent_id, or the token that sent it when it named none."""
    unnamed = sa.or_(_REQ.c.agent_id.is_(None), _REQ.c.agent_id == "")
    return sa.or_(_REQ.c.agent_id == _AGENT, sa.and_(unnamed, _REQ.c.submitted_by == _AGENT))


def _counts() -> sa.Select[Any]:
    """(rejections among the agent's last `k` decided requests, rejections since `hour_ago`),
    both counting only decisions after the agent's last reset."""
    last_reset = sa.select(sa.func.max(TRIP.c.reset_at)).where(TRIP.c.agent == _AGENT)
    since = sa.func.coalesce(last_reset.scalar_subquery(), sa.bindparam("epoch", _EPOCH))
    decided = sa.and_(_of_agent(), _REQ.c.decided_at > since)
    latest = (
        sa.select(_REQ.c.status)
        .where(decided, _REQ.c.status.in_([RequestStatus.approved, RequestStatus.rejected]))
        .order_by(_REQ.c.decided_at.desc(), _REQ.c.id.desc())
        .limit(sa.bindparam("k", type_=sa.Integer))
        .subquery("latest")
    )
    in_a_row = sa.select(sa.func.count()).where(latest.c.status == RequestStatus.rejected)
    in_hour = sa.select(sa.func.count()).where(
        decided,
        _REQ.c.status == RequestStatus.rejected,
        _REQ.c.decided_at >= sa.bindparam("hour_ago", type_=_REQ.c.decided_at.type),
    )
    return sa.select(in_a_row.scalar_subquery(), in_hour.scalar_subquery())


COUNTS = _counts()
_LOCK = sa.select(
    sa.func.pg_advisory_xact_lock(_LOCK_SPACE, sa.func.hashtext(sa.bindparam("agent")))
)


def count_rejections(
    session: Session, *, agent: str, in_a_row: int, now: datetime
) -> tuple[int, int]:
    """(how many of the agent's last `in_a_row` decisions were rejections, how many of its
    calls were rejected in the hour before `now`), since its last reset; in the caller's
    transaction, after the rejection it just wrote, and serialised per agent (see above)."""
    batch.before_reading(session, _REQ)  # the rejection itself must be counted
    conn = session.connection()
    if conn.dialect.name == "postgresql":
        conn.execute(_LOCK, {"agent": agent})
    params = {"agent": agent, "k": max(in_a_row, 1), "hour_ago": now - timedelta(hours=1)}
    found = conn.execute(COUNTS, params).one()
    return int(found[0]), int(found[1])


def trip(session: Session, row: TripRow) -> bool:
    """Store an active trip; False when the agent was tripped already (nothing written)."""
    conn = session.connection()
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    values = {
        "agent": row.agent,
        "reason": row.reason,
        "request_id": row.request_id,
        "tripped_at": row.tripped_at,
    }
    statement = (
        dialect.insert(TRIP)
        .values(**values)
        .on_conflict_do_nothing(
            index_elements=[TRIP.c.agent], index_where=TRIP.c.reset_at.is_(None)
        )
        .returning(TRIP.c.id)
    )
    return conn.execute(statement).first() is not None


def reset(session: Session, *, agent: str, by: str, now: datetime) -> TripRow | None:
    """End the agent's active trip; the trip as it was, or None when it was not tripped."""
    statement = (
        sa.update(TRIP)
        .where(TRIP.c.agent == agent, TRIP.c.reset_at.is_(None))
        .values(reset_at=now, reset_by=by)
        .returning(*_FIELDS)
    )
    found = session.connection().execute(statement).first()
    if found is None:
        return None
    return TripRow(found.agent, found.reason, found.request_id, found.tripped_at, now, by)


def active(conn: sa.Connection) -> list[TripRow]:
    """Every active trip, oldest first (one statement: what a replica keeps in memory)."""
    found = conn.execute(sa.select(*_FIELDS).where(TRIP.c.reset_at.is_(None)).order_by(TRIP.c.id))
    return [TripRow(*row) for row in found.all()]


def recent(conn: sa.Connection, limit: int = 50) -> list[TripRow]:
    """The latest trips, active and reset, newest first (the console's agents page)."""
    statement = (
        sa.select(*_FIELDS, TRIP.c.reset_at, TRIP.c.reset_by)
        .order_by(TRIP.c.id.desc())
        .limit(limit)
    )
    return [TripRow(*row) for row in conn.execute(statement).all()]


__all__ = ["COUNTS", "TRIP", "active", "count_rejections", "recent", "reset", "trip"]
