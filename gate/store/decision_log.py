"""The decision log's statements: a batch written in one multi-row INSERT, pages read by
filter, the retention prune, and the rows replay reads (joined to each ask's request).

`gate.decisions.decision_log` buffers answers and calls `insert` once a window; `GET /v1/decisions`,
the console page and `gate policy replay` read through `page` and `since`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gate.store.records import DECISION_FIELDS, DecisionRow, ReplayRow
from gate.store.tables import ConfirmationRequest, DecisionLogEntry

TABLE: sa.Table = DecisionLogEntry.__table__  # type: ignore[attr-defined]
REQUESTS: sa.Table = ConfirmationRequest.__table__  # type: ignore[attr-defined]
#: rows per INSERT statement: a window's batch is one statement up to this many rows (15
#: columns a row keeps it under SQLite's 32,766 bound parameters with room to spare)
ROWS_PER_STATEMENT = 1000
#: rows one prune statement deletes: a first prune of a big table runs in short transactions
PRUNE_BATCH = 5000
#: the filters `page` takes, by column
FILTERS = ("agent_id", "tool_name", "rule", "answer", "session_id", "user_id")


def insert(conn: sa.Connection, rows: Sequence[DecisionRow]) -> int:
    """Write `rows` (ids unset) as one INSERT of many rows."""
    values = [{name: getattr(row, name) for name in _WRITTEN} for row in rows]
    conn.execute(_INSERT, values)
    return len(values)


#: the columns a batch writes (the id is the database's)
_WRITTEN = tuple(name for name in DECISION_FIELDS if name != "id")
_INSERT = sa.insert(TABLE)


def page(
    conn: sa.Connection,
    *,
    filters: dict[str, str | None],
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: int | None = None,
    limit: int = 50,
) -> tuple[list[DecisionRow], int | None]:
    """Rows newest first (by id) matching `filters`, and the cursor of the next page."""
    stmt = sa.select(TABLE).order_by(TABLE.c.id.desc()).limit(limit + 1)
    for name in FILTERS:
        value = filters.get(name)
        if value:
            stmt = stmt.where(TABLE.c[name] == value)
    if since is not None:
        stmt = stmt.where(TABLE.c.at >= since)
    if until is not None:
        stmt = stmt.where(TABLE.c.at < until)
    if cursor is not None:
        stmt = stmt.where(TABLE.c.id < cursor)
    found = [_row(r._mapping) for r in conn.execute(stmt)]
    more = len(found) > limit
    found = found[:limit]
    return found, (found[-1].id if more and found else None)


def since(conn: sa.Connection, start: datetime) -> Iterator[ReplayRow]:
    """Every row from `start` on, oldest first, each ask with its request's end."""
    stmt = (
        sa.select(TABLE, REQUESTS.c.status, REQUESTS.c.decided_by)
        .select_from(TABLE.outerjoin(REQUESTS, REQUESTS.c.id == TABLE.c.request_id))
        .where(TABLE.c.at >= start)
        .order_by(TABLE.c.id)
    )
    for found in conn.execute(stmt):
        mapping = found._mapping
        yield ReplayRow(
            entry=_row(mapping), status=mapping["status"], decided_by=mapping["decided_by"]
        )


def prune(conn: sa.Connection, *, older_than: datetime, facts_before: datetime) -> tuple[int, int]:
    """Delete up to `PRUNE_BATCH` rows from before `older_than`, and clear the whole
    arguments of up to `PRUNE_BATCH` rows from before `facts_before`; (deleted, cleared)."""
    doomed = sa.select(TABLE.c.id).where(TABLE.c.at < older_than).limit(PRUNE_BATCH)
    deleted = conn.execute(sa.delete(TABLE).where(TABLE.c.id.in_(doomed.scalar_subquery())))
    # the partial index `ix_decision_log_facts` holds exactly the rows this looks for
    held = sa.select(TABLE.c.id).where(TABLE.c.facts.is_not(None), TABLE.c.at < facts_before)
    cleared = conn.execute(
        sa.update(TABLE)
        .where(TABLE.c.id.in_(held.limit(PRUNE_BATCH).scalar_subquery()))
        .values(facts=sa.null())
    )
    return deleted.rowcount, cleared.rowcount


def _row(mapping: Any) -> DecisionRow:
    return DecisionRow(**{name: mapping[name] for name in DECISION_FIELDS})
