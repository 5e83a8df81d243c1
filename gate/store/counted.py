"""The calls history-aware conditions count (`gate.policy.history`): one row written per
counted call, and one read per scope that adds them up by tool over several windows.

Which calls count is decided here, in SQL, once: a call let through at once (no request), and
an asked call while its request is pending or approved, unless the agent reported it did not
run it (`outcome = "not_run"`). A rejected, expired or cancelled ask adds nothing: no money
was spent on it. The read joins each asked row to its request by primary key, so a decision
needs no write here.

The read is one statement grouped by tool: the glob of each term is matched in Python by
the caller (`gate.decisions.history`), with the same matcher the rules use (case, width and
look-alike variants), which SQL's LIKE cannot spell. An agent uses few distinct tools, so the
groups are few. It runs on `ix_counted_call_caller_at` (per caller) or
`ix_counted_call_session_at` (per caller and session), bounded by the widest window.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gate.base.statuses import RequestStatus
from gate.store.tables import ConfirmationRequest, CountedCall

TABLE: sa.Table = CountedCall.__table__  # type: ignore[attr-defined]
REQUESTS: sa.Table = ConfirmationRequest.__table__  # type: ignore[attr-defined]
#: the most numeric arguments one row keeps (a call's arguments are few; this bounds a
#: hostile call with thousands of numbers)
MAX_NUMBERS = 32
#: rows one prune statement deletes: a first prune of a big table runs in short transactions
PRUNE_BATCH = 5000
#: an asked call counts while its request is one of these (in flight, or let through)
COUNTING = (RequestStatus.pending.value, RequestStatus.approved.value)
Number = int | float


@dataclass(frozen=True)
class Window:
    """One figure to add up: calls since `since`, counted (`arg` None) or `arg` summed."""

    since: datetime
    arg: str | None = None


@dataclass(frozen=True)
class ToolTally:
    """One tool's figures, in the order of the windows asked for (a sum of nothing is 0)."""

    tool_name: str
    values: tuple[Number, ...]


def numbers_of(args: Mapping[str, Any]) -> dict[str, Number] | None:
    """The top-level arguments that are numbers (not true/false, finite), at most
    `MAX_NUMBERS` of them; None when there are none."""
    found: dict[str, Number] = {}
    for name, value in args.items():
        if len(found) >= MAX_NUMBERS:
            break
        if isinstance(value, int | float) and not isinstance(value, bool):
            if isinstance(value, int) or math.isfinite(value):
                found[name] = value
    return found or None


def record(
    conn: sa.Connection | Any,
    *,
    caller: str,
    session_id: str | None,
    tool_name: str,
    args: Mapping[str, Any],
    request_id: str | None,
    at: datetime,
) -> None:
    """Write one counted call (in the caller's transaction: an ask's, or its own)."""
    conn.execute(
        _INSERT,
        {
            "caller": caller,
            "session_id": session_id,
            "tool_name": tool_name,
            "request_id": request_id,
            "numbers": numbers_of(args),
            "at": at,
        },
    )


_INSERT = sa.insert(TABLE)


def tallies(
    conn: sa.Connection | Any,
    *,
    caller: str,
    session_id: str | None,
    windows: Sequence[Window],
    per_session: bool,
) -> list[ToolTally]:
    """The caller's (or the caller's session's, `per_session`) counted calls by tool, each
    tool with one figure per window."""
    c, r = TABLE.c, REQUESTS.c
    columns: list[Any] = [c.tool_name]
    for i, window in enumerate(windows):
        inside = c.at >= window.since
        if window.arg is None:
            columns.append(sa.func.sum(sa.case((inside, 1), else_=0)).label(f"v{i}"))
        else:
            value = c.numbers[window.arg].as_float()
            columns.append(sa.func.sum(sa.case((inside, value), else_=None)).label(f"v{i}"))
    where: list[Any] = [c.caller == caller, c.at >= min(w.since for w in windows)]
    if per_session:
        where.append(c.session_id == session_id)
    counts = sa.or_(
        c.request_id.is_(None),
        sa.and_(
            r.status.in_(COUNTING),
            sa.or_(r.outcome.is_(None), r.outcome != "not_run"),
        ),
    )
    stmt = (
        sa.select(*columns)
        .select_from(TABLE.outerjoin(REQUESTS, r.id == c.request_id))
        .where(*where, counts)
        .group_by(c.tool_name)
    )
    return [ToolTally(row[0], tuple(_number(v) for v in row[1:])) for row in conn.execute(stmt)]


def lock(conn: sa.Connection | Any, caller: str) -> None:
    """Hold `caller`'s history until the transaction ends, so two of its calls judged at once
    take turns: the second reads what the first wrote. PostgreSQL: a transaction-level
    advisory lock on the caller's name; SQLite: nothing to do (a write transaction is
    `BEGIN IMMEDIATE`, one writer at a time)."""
    if conn.dialect.name != "postgresql":
        return
    # the lock's key: 63 bits of a hash of the name (a collision only makes two callers wait)
    key = int.from_bytes(hashlib.blake2b(caller.encode(), digest_size=8).digest(), "big") >> 1
    conn.execute(_LOCK, {"key": key})


_LOCK = sa.text("SELECT pg_advisory_xact_lock(:key)")


def prune(conn: sa.Connection | Any, *, older_than: datetime) -> int:
    """Delete up to `PRUNE_BATCH` rows from before `older_than` (beyond every window)."""
    doomed = sa.select(TABLE.c.id).where(TABLE.c.at < older_than).limit(PRUNE_BATCH)
    result = conn.execute(sa.delete(TABLE).where(TABLE.c.id.in_(doomed.scalar_subquery())))
    return int(result.rowcount)


def _number(value: Any) -> Number:
    """A sum as CEL gets it: an int when it is whole (so `+ args.amount` of whole amounts
    works), else a double; nothing summed is 0."""
    if value is None:
        return 0
    number = float(value)
    return int(number) if number.is_integer() else number
