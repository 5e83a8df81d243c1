"""What the history, export and stats pages make of the store's reads (`gate.store.listing`):
export formats, the stats page's figures, one request's audit chain checked.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

from gate.base.statuses import RequestStatus
from gate.decisions.audit import audit_hash
from gate.store import listing, trail
from gate.store.db import Database

#: time-to-decision buckets: upper bound in seconds and label
DECISION_BUCKETS: list[tuple[float, str]] = [
    (60, "< 1 min"),
    (300, "1–5 min"),
    (900, "5–15 min"),
    (3600, "15–60 min"),
    (4 * 3600, "1–4 h"),
    (float("inf"), "> 4 h"),
]


def to_jsonl(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    """One JSON object per line."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False, default=str) + "\n"


def to_csv(rows: Iterator[dict[str, Any]]) -> Iterator[str]:
    """CSV with a header; cells that a spreadsheet would run as a formula are defused."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(listing.EXPORT_COLUMNS)
    yield buffer.getvalue()
    for row in rows:
        buffer.seek(0)
        buffer.truncate()
        cells = [row[c] for c in listing.EXPORT_COLUMNS]
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
    rows, votes, older = listing.stats_rows(db, start)
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
        for event in trail.events_of(session, request_id):
            event_id = event.id or 0
            short[event_id] = (event.chain_hash or "")[:12]
            if event.prev_hash != prev or event.chain_hash != audit_hash(event):
                broken.append(event_id)
            prev = event.chain_hash
    return ChainCheck(short, broken)
