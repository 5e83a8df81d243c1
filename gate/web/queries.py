"""Read-only queries behind the history, export and stats pages.

They read the tables directly (read sessions only, never a write): the service layer owns
every change, and these pages only look.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import col, select

from gate.base.statuses import RequestStatus
from gate.decisions.audit import audit_hash
from gate.store.db import Database
from gate.store.tables import AuditEvent, ConfirmationRequest, Grant, Vote

FINAL_STATUSES = [s.value for s in RequestStatus if s.is_final]
EXPORT_COLUMNS = [
    "request_id",
    "at",
    "kind",
    "actor",
    "via",
    "tool_name",
    "agent_id",
    "user_id",
    "rule",
    "status",
    "detail",
]
#: time-to-decision buckets: upper bound in seconds and label
DECISION_BUCKETS: list[tuple[float, str]] = [
    (60, "< 1 min"),
    (300, "1–5 min"),
    (900, "5–15 min"),
    (3600, "15–60 min"),
    (4 * 3600, "1–4 h"),
    (float("inf"), "> 4 h"),
]


@dataclass(frozen=True)
class HistoryFilter:
    """The history page's filters; empty fields filter nothing."""

    status: str | None = None
    tool: str | None = None
    agent: str | None = None
    approver: str | None = None
    since: date | None = None
    until: date | None = None

    def query_args(self) -> dict[str, str]:
        """The filters as query-string arguments (for paging and export links)."""
        pairs = {
            "status": self.status,
            "tool": self.tool,
            "agent": self.agent,
            "approver": self.approver,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        }
        return {k: v for k, v in pairs.items() if v}

    def where(self) -> list[Any]:
        """SQL conditions on `confirmation_request` for these filters."""
        req = ConfirmationRequest
        conds: list[Any] = []
        if self.status:
            conds.append(req.status == self.status)
        else:
            conds.append(col(req.status).in_(FINAL_STATUSES))
        if self.tool:
            conds.append(req.tool_name == self.tool)
        if self.agent:
            conds.append(req.agent_id == self.agent)
        if self.approver:
            voted = select(Vote.request_id).where(Vote.approver == self.approver)
            conds.append(sa.or_(col(req.decided_by) == self.approver, col(req.id).in_(voted)))
        if self.since:
            conds.append(col(req.created_at) >= datetime.combine(self.since, time(), UTC))
        if self.until:
            end = datetime.combine(self.until + timedelta(days=1), time(), UTC)
            conds.append(col(req.created_at) < end)
        return conds


def history_page(
    db: Database, filters: HistoryFilter, *, limit: int, cursor: str | None
) -> tuple[list[ConfirmationRequest], str | None]:
    """Finished requests matching `filters`, newest first; returns the next cursor too."""
    stmt = select(ConfirmationRequest).where(*filters.where())
    if cursor:
        stmt = stmt.where(col(ConfirmationRequest.id) < cursor)
    stmt = stmt.order_by(col(ConfirmationRequest.id).desc()).limit(limit + 1)
    with db.read() as session:
        rows = list(session.exec(stmt).all())
        for row in rows:
            session.expunge(row)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1].id if more and rows else None)


def distinct_values(db: Database) -> dict[str, list[str]]:
    """Known tools, agents and approvers, for the filter pickers."""
    req = ConfirmationRequest
    with db.read() as session:
        tools = session.execute(sa.select(col(req.tool_name)).distinct().limit(200)).scalars()
        agents = session.execute(
            sa.select(col(req.agent_id)).where(col(req.agent_id).is_not(None)).distinct().limit(200)
        ).scalars()
        return {"tools": sorted(tools), "agents": sorted(a for a in agents if a)}


def audit_rows(db: Database, filters: HistoryFilter) -> Iterator[dict[str, Any]]:
    """Every audit event of the requests matching `filters`, request by request."""
    req, ev = ConfirmationRequest, AuditEvent
    stmt = (
        sa.select(
            *(
                col(c)
                for c in (
                    ev.request_id,
                    ev.at,
                    ev.kind,
                    ev.actor,
                    ev.via,
                    req.tool_name,
                    req.agent_id,
                    req.user_id,
                    req.rule,
                    req.status,
                    ev.detail,
                )
            )
        )
        .join(req, col(req.id) == col(ev.request_id))
        .where(*filters.where())
        .order_by(col(req.id).desc(), col(ev.id))
    )
    with db.read() as session:
        for row in session.execute(stmt.execution_options(yield_per=500)):
            record = dict(zip(EXPORT_COLUMNS, row, strict=True))
            record["at"] = record["at"].isoformat()
            yield record


def to_jsonl(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    """One JSON object per line."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False, default=str) + "\n"


def to_csv(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    """CSV with a header; cells that a spreadsheet would run as a formula are defused."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(EXPORT_COLUMNS)
    yield buffer.getvalue()
    for row in rows:
        buffer.seek(0)
        buffer.truncate()
        cells = [row[c] for c in EXPORT_COLUMNS]
        cells[-1] = json.dumps(cells[-1], ensure_ascii=False, default=str)
        writer.writerow([_defuse("" if c is None else str(c)) for c in cells])
        yield buffer.getvalue()


def _defuse(cell: str) -> str:
    # Agent-supplied text lands in these cells; "=HYPERLINK(...)" must stay text in Excel.
    return "'" + cell if cell[:1] in ("=", "+", "-", "@", "\t", "\r") else cell


# -- stats ----------------------------------------------------------------------------------


@dataclass
class Stats:
    """Everything the stats page draws."""

    days: int
    decision_times: list[tuple[str, int]] = field(default_factory=list)
    median_seconds: float | None = None
    by_rule: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    by_approver: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    backlog: list[tuple[str, int]] = field(default_factory=list)
    expiries: list[tuple[str, int]] = field(default_factory=list)
    total: int = 0
    pending_now: int = 0


def stats(db: Database, *, now: datetime, days: int = 14) -> Stats:
    """Time to decision, outcomes by rule and approver, backlog and expiries over `days`."""
    start = datetime.combine((now - timedelta(days=days - 1)).date(), time(), UTC)
    rows, votes, older = _stats_rows(db, start)
    result = Stats(days=days)
    result.total = sum(1 for r in rows if r.created_at >= start)
    result.pending_now = sum(1 for r in rows if r.status == RequestStatus.pending)
    waits = [
        (r.decided_at - r.created_at).total_seconds()
        for r in rows
        if r.decided_at and r.status in ("approved", "rejected") and r.decided_via != "timeout"
    ]
    buckets = Counter(_bucket(w) for w in waits)
    result.decision_times = [(label, buckets[label]) for _, label in DECISION_BUCKETS]
    if waits:
        ordered = sorted(waits)
        result.median_seconds = ordered[len(ordered) // 2]
    by_rule: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        if r.created_at >= start:
            by_rule[r.rule or "(none)"][r.status] += 1
    result.by_rule = _busiest_first(by_rule)
    by_approver: dict[str, Counter[str]] = defaultdict(Counter)
    for approver, verdict, n in votes:
        by_approver[approver][verdict] += int(n)
    result.by_approver = _busiest_first(by_approver)
    _daily(result, rows, older, start=start, now=now)
    return result


def _stats_rows(db: Database, start: datetime) -> tuple[list[Any], list[Any], list[Any]]:
    """Requests in the window (or pending), votes in it, and older requests still open in it."""
    req = ConfirmationRequest
    with db.read() as session:
        rows = session.execute(
            sa.select(
                col(req.rule),
                col(req.status),
                col(req.created_at),
                col(req.decided_at),
                col(req.decided_via),
            ).where(sa.or_(col(req.created_at) >= start, col(req.status) == RequestStatus.pending))
        ).all()
        votes = session.execute(
            sa.select(col(Vote.approver), col(Vote.verdict), sa.func.count())
            .where(col(Vote.at) >= start)
            .group_by(Vote.approver, Vote.verdict)
        ).all()
        # Requests created before the window that were still open inside it count in backlog.
        older = session.execute(
            sa.select(col(req.created_at), col(req.decided_at)).where(
                col(req.created_at) < start,
                sa.or_(col(req.decided_at).is_(None), col(req.decided_at) >= start),
            )
        ).all()
    return list(rows), list(votes), list(older)


def _busiest_first(counts: dict[str, Counter[str]]) -> list[tuple[str, dict[str, int]]]:
    return sorted(((k, dict(c)) for k, c in counts.items()), key=lambda x: -sum(x[1].values()))


def _daily(
    result: Stats, rows: list[Any], older: list[Any], *, start: datetime, now: datetime
) -> None:
    """The backlog at the end of each day (or now, for today) and the expiries per day."""
    spans = [(r.created_at, r.decided_at) for r in rows] + [(o[0], o[1]) for o in older]
    expired = Counter(
        r.decided_at.date() for r in rows if r.status == RequestStatus.expired and r.decided_at
    )
    for offset in range(result.days):
        day = start.date() + timedelta(days=offset)
        at = min(datetime.combine(day + timedelta(days=1), time(), UTC), now)
        open_then = sum(1 for c, d in spans if c <= at and (d is None or d > at))
        label = day.strftime("%m-%d")
        result.backlog.append((label, open_then))
        result.expiries.append((label, expired[day]))


def _bucket(seconds: float) -> str:
    return next(label for bound, label in DECISION_BUCKETS if seconds < bound)


# -- one request: grants and the audit chain ------------------------------------------------


@dataclass(frozen=True)
class ChainCheck:
    """One request's audit chain, recomputed: the short hash per event and what is broken."""

    short: dict[int, str]
    broken: list[int]

    @property
    def intact(self) -> bool:
        return not self.broken


def audit_chain(db: Database, request_id: str) -> ChainCheck:
    """Recompute the hash chain of one request's audit events (a few rows, so cheap)."""
    short: dict[int, str] = {}
    broken: list[int] = []
    prev: str | None = None
    with db.read() as session:
        events = session.exec(
            select(AuditEvent)
            .where(AuditEvent.request_id == request_id)
            .order_by(col(AuditEvent.id))
        ).all()
        for event in events:
            event_id = event.id or 0
            short[event_id] = (event.chain_hash or "")[:12]
            if event.prev_hash != prev or event.chain_hash != audit_hash(event):
                broken.append(event_id)
            prev = event.chain_hash
    return ChainCheck(short, broken)


def grant(db: Database, grant_id: str) -> Grant | None:
    """One grant, detached from its session."""
    with db.read() as session:
        row = session.get(Grant, grant_id)
        if row is not None:
            session.expunge(row)
        return row


def grants_from(db: Database, request_id: str) -> list[Grant]:
    """The grants made when approving `request_id`."""
    with db.read() as session:
        rows = list(
            session.exec(
                select(Grant).where(Grant.request_id == request_id).order_by(col(Grant.created_at))
            ).all()
        )
        for row in rows:
            session.expunge(row)
    return rows
