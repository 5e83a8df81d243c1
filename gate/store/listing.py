"""The console's reads: finished requests by filter, their audit events for export, the rows
the stats page counts, and a request's grants. Read sessions only: every change is a use
case's (`gate.decisions`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from gate.base.statuses import RequestStatus
from gate.store.db import Database
from gate.store.tables import AuditEvent, ConfirmationRequest, Delivery, Grant, Vote

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


def stats_rows(db: Database, start: datetime) -> tuple[list[Any], list[Any], list[Any]]:
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


#: the request columns `GET /v1/requests` filters on by equality
REQUEST_FILTERS = (
    "tool_name",
    "agent_id",
    "user_id",
    "session_id",
    "rule",
    "decided_by",
    "idempotency_key",
)


def requests(
    session: Session,
    status: str | None,
    cursor: str | None,
    submitted_by: str | None,
    filters: dict[str, str | None],
    limit: int,
) -> list[ConfirmationRequest]:
    """Requests newest first, after `cursor` (the last id of the previous page), of
    `submitted_by` only when given, matching `status` and each of `REQUEST_FILTERS` given."""
    req = ConfirmationRequest
    stmt = select(req).order_by(col(req.id).desc())
    if status:
        stmt = stmt.where(req.status == status)
    if cursor:
        stmt = stmt.where(col(req.id) < cursor)
    if submitted_by is not None:
        stmt = stmt.where(req.submitted_by == submitted_by)
    for column in REQUEST_FILTERS:
        value = filters.get(column)
        if value:
            stmt = stmt.where(getattr(req, column) == value)
    return list(session.exec(stmt.limit(limit)).all())


def deliveries_of(session: Session, request_id: str) -> list[Delivery]:
    """`request_id`'s card deliveries, oldest first."""
    stmt = select(Delivery).where(Delivery.request_id == request_id).order_by(col(Delivery.id))
    return list(session.exec(stmt).all())
