"""The reads `/metrics` makes at scrape time: requests and undelivered cards grouped for the
gauges, and when each finished request was created and decided (the time-to-decision
histogram). Each is one grouped or keyed query in a read transaction of its own."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import col, select

from gate.base.statuses import DeliveryStatus
from gate.store.db import Database
from gate.store.tables import ConfirmationRequest, Delivery

#: ids per `IN (...)` list: well under SQLite's and PostgreSQL's bound-parameter limits
_CHUNK = 500


def requests_by_status_and_rule(db: Database) -> list[tuple[str, str, int]]:
    """(status, rule or "", count) over every request."""
    with db.read() as session:
        rows = session.execute(
            sa.select(
                col(ConfirmationRequest.status), col(ConfirmationRequest.rule), sa.func.count()
            ).group_by(col(ConfirmationRequest.status), col(ConfirmationRequest.rule))
        ).all()
    return [(str(status), rule or "", int(n)) for status, rule, n in rows]


def deliveries_not_sent(db: Database) -> list[tuple[str, str, int]]:
    """(status, channel, count) of card deliveries still owed or given up."""
    with db.read() as session:
        rows = session.execute(
            sa.select(col(Delivery.status), col(Delivery.channel), sa.func.count())
            .where(col(Delivery.status) != DeliveryStatus.sent)
            .group_by(col(Delivery.status), col(Delivery.channel))
        ).all()
    return [(str(status), str(channel), int(n)) for status, channel, n in rows]


def decision_times(db: Database, ids: list[str]) -> Iterator[tuple[str, datetime, datetime | None]]:
    """(status, created_at, decided_at) of the requests `ids`, in chunks of `_CHUNK`."""
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        with db.read() as session:
            rows = session.exec(
                select(
                    ConfirmationRequest.status,
                    ConfirmationRequest.created_at,
                    ConfirmationRequest.decided_at,
                ).where(col(ConfirmationRequest.id).in_(chunk))
            ).all()
        yield from ((str(status), created, decided) for status, created, decided in rows)
