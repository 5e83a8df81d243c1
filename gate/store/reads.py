"""The use cases' reads (`gate.decisions.service`): a request by its idempotency key, with its
votes, and the expiry sweep's due work. Typed rows back (`gate.store.records`), nothing of the ORM.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session, col

from gate.store import direct, rows
from gate.store.grants import DUE as DUE_GRANTS
from gate.store.records import RequestRow, VoteRow
from gate.store.tables import ConfirmationRequest

#: the kinds of work `due_work` finds
REQUEST, GRANT = "request", "grant"
#: the sweep's work: due requests and due grants, each row tagged with its `kind`
_DUE_WORK = sa.union_all(
    sa.select(sa.literal(REQUEST).label("kind"), rows.DUE_REQUESTS.c.id),
    sa.select(sa.literal(GRANT).label("kind"), DUE_GRANTS.subquery("due_grants").c.id),
)


def by_key(session: Session, key: str | None, submitted_by: str | None) -> RequestRow | None:
    """The request `submitted_by` made under idempotency key `key`, if any."""
    params = {"key": key, "submitted_by": submitted_by}
    found = direct.execute(session.connection(), rows.BY_KEY, params).first()
    return rows.request_row(found._mapping) if found is not None else None


def due_work(conn: sa.Connection, now: datetime, limit: int) -> list[tuple[str, str]]:
    """(kind, id) of each pending request whose deadline passed and each active grant whose
    time is up, at most `limit` of each, in one statement (it runs every second on every
    replica, mostly to find nothing)."""
    found = conn.execute(_DUE_WORK, {"now": now, "limit": limit}).all()
    return [(row.kind, row.id) for row in found]


def request(session: Session, request_id: str) -> RequestRow | None:
    """The request's row, or None."""
    return rows.read(session, request_id)


def with_votes(conn: sa.Connection, request_id: str) -> tuple[RequestRow, list[VoteRow]] | None:
    """The request and its votes, oldest first, in one statement; None if unknown."""
    return rows.with_votes(conn, request_id)


def votes(session: Session, request_id: str) -> list[VoteRow]:
    """The request's votes, oldest first."""
    return rows.votes(session, request_id)


def counts(session: Session) -> list[tuple[str, int]]:
    """(status, how many requests have it) for each status in use."""
    found = session.execute(
        sa.select(col(ConfirmationRequest.status), sa.func.count()).group_by(
            ConfirmationRequest.status
        )
    ).all()
    return [(str(status), int(n)) for status, n in found]
