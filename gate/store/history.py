"""History readers for the stats page, the fatigue metrics and `gate policy suggest`.

Read sessions only, narrow columns, typed rows back (`gate.store.records`). The grouping
by day, hour and approver is done by the callers in Python: day and hour arithmetic is
spelt differently in SQLite and PostgreSQL, and a month of asks is a few ten thousand
short rows.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import col

from gate.base.statuses import DeliveryKind
from gate.store.db import Database
from gate.store.records import AskRow, DecidedCall, VoteTiming
from gate.store.tables import ConfirmationRequest, Delivery, Vote

#: statuses a person (not a clock, not a grant) can end a request with
DECIDED = ("approved", "rejected")


def asks_since(db: Database, since: datetime) -> list[AskRow]:
    """Requests made since `since` that asked a person (a grant's pass-through is no ask)."""
    req = ConfirmationRequest
    stmt = sa.select(
        col(req.id),
        col(req.rule),
        col(req.tool_name),
        col(req.status),
        col(req.created_at),
        col(req.decided_at),
        col(req.decided_via),
    ).where(col(req.created_at) >= since, col(req.grant_id).is_(None))
    with db.read() as session:
        return [AskRow(**row._mapping) for row in session.execute(stmt)]


def vote_timings(db: Database, since: datetime) -> list[VoteTiming]:
    """Votes on requests made since `since`, each with when its card was first shown."""
    req, vote, post = ConfirmationRequest, Vote, Delivery
    first_post = (
        sa.select(sa.func.min(col(post.sent_at)))
        .where(
            col(post.request_id) == col(vote.request_id),
            col(post.channel) == col(vote.via),
            col(post.kind) == DeliveryKind.post.value,
        )
        .scalar_subquery()
    )
    stmt = (
        sa.select(
            col(vote.request_id),
            col(vote.approver),
            col(vote.verdict),
            col(vote.via),
            col(vote.at),
            col(req.created_at),
            first_post.label("posted_at"),
        )
        .join(req, col(req.id) == col(vote.request_id))
        .where(col(req.created_at) >= since)
    )
    with db.read() as session:
        found = session.execute(stmt).all()
    return [
        VoteTiming(
            request_id=r.request_id,
            approver=r.approver,
            verdict=r.verdict,
            via=r.via,
            at=r.at,
            shown_at=_utc(r.posted_at) or r.created_at,
        )
        for r in found
    ]


def decided_calls(
    db: Database,
    *,
    since: datetime | None,
    before: datetime | None = None,
    tools: Collection[str] | None = None,
) -> list[DecidedCall]:
    """Requests people approved or rejected (made from `since` to before `before`, of
    `tools`, each when given), newest first, each with its votes."""
    req = ConfirmationRequest
    conds: list[Any] = [
        col(req.status).in_(DECIDED),
        col(req.grant_id).is_(None),
        sa.or_(col(req.decided_via).is_(None), col(req.decided_via) != "timeout"),
    ]
    if since is not None:
        conds.append(col(req.created_at) >= since)
    if before is not None:
        conds.append(col(req.created_at) < before)
    if tools is not None:
        conds.append(col(req.tool_name).in_(sorted(tools)))
    stmt = (
        sa.select(
            col(req.id),
            col(req.tool_name),
            col(req.tool_args),
            col(req.agent_id),
            col(req.user_id),
            col(req.rule),
            col(req.status),
            col(req.created_at),
            col(req.decided_at),
            col(req.approved_args),
            col(Vote.approver),
            col(Vote.verdict),
        )
        .outerjoin(Vote, col(Vote.request_id) == col(req.id))
        .where(*conds)
        .order_by(col(req.id).desc(), col(Vote.id))
    )
    calls: list[DecidedCall] = []
    with db.read() as session:
        for row in session.execute(stmt.execution_options(yield_per=1000)):
            if calls and calls[-1].id == row.id:
                calls[-1] = _with_vote(calls[-1], row.approver, row.verdict)
                continue
            calls.append(_call(row))
    return calls


def _call(row: Any) -> DecidedCall:
    return DecidedCall(
        id=row.id,
        tool_name=row.tool_name,
        tool_args=dict(row.tool_args or {}),
        agent_id=row.agent_id,
        user_id=row.user_id,
        rule=row.rule,
        status=row.status,
        created_at=row.created_at,
        decided_at=row.decided_at,
        edited=row.approved_args is not None,
        votes=((row.approver, row.verdict),) if row.approver else (),
    )


def _with_vote(call: DecidedCall, approver: str, verdict: str) -> DecidedCall:
    return replace(call, votes=(*call.votes, (approver, verdict)))


def _utc(value: datetime | None) -> datetime | None:
    # A MIN() over a UTC column comes back as the driver gives it: naive text on SQLite.
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
