"""Grants' SQL: the statements a grant is written, found, listed and counted with.

`gate.decisions.grants` decides (which grant an approval makes, which one covers a call); these run
the statements, in the caller's transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from gate.base.statuses import GrantStatus, Verdict
from gate.store import batch, direct
from gate.store.rows import GRANT, VOTE
from gate.store.tables import Grant, UTCDateTime


def insert(session: Session, values: dict[str, Any]) -> None:
    """Write a new grant (every column `_GRANT_COLUMNS` names), with the change's batch."""
    batch.write(session, _INSERT, values)


def candidates(session: Session, params: dict[str, Any]) -> list[Any]:
    """The active grants of the call's tool, rule, submitter and quorum, unexpired at
    `now`, latest ending first (`_CANDIDATES`)."""
    return direct.execute(session.connection(), _CANDIDATES, params).all()


def take_use(
    session: Session, grant_id: str, *, now: datetime, used_up: str
) -> tuple[int, int] | None:
    """Take one use of a counted grant, if it has one left (compare-and-set): the grant's
    (uses, max_uses) after it, or None when it was used up, ended or expired meanwhile.

    Runs at once, not with the change's batch: whether the call goes through depends on it.
    The use that takes the last one ends the grant as `used_up` (the status the machine
    passes) in the same statement, so two calls racing for the last use cannot both get
    it: on PostgreSQL the second waits for the first's row lock and then finds the grant
    no longer active; SQLite has one writer at a time.
    """
    params = {"grant_id": grant_id, "now": now, "used_up": used_up}
    found = direct.execute(session.connection(), _TAKE, params).first()
    return (int(found.uses), int(found.max_uses)) if found is not None else None


def approvers(session: Session, request_id: str) -> list[str]:
    """Who approved a request (the people behind a grant it made)."""
    return list(
        direct.execute(session.connection(), _APPROVERS, {"request_id": request_id}).scalars()
    )


#: what `create` writes: every column but the two an ending sets (`machine.end_grant`)
_GRANT_COLUMNS = tuple(c.name for c in GRANT.columns if c.name not in ("ended_at", "ended_by"))
_INSERT = batch.insert(GRANT, _GRANT_COLUMNS)  # the id is ours (a ULID): nothing to return
#: only what matching and `machine.allow_by_grant` read: every column a row returns costs
#: the driver a description on each call, found or not
_CANDIDATES = (
    sa.select(
        *(
            GRANT.c[name]
            for name in ("id", "request_id", "scope", "approvers", "args_hash", "session_id")
            + ("agent_id", "created_by", "expires_at", "pinned", "max_uses", "uses")
        )
    )
    .where(
        GRANT.c.status == GrantStatus.active.value,
        GRANT.c.tool_name == sa.bindparam("tool_name"),
        GRANT.c.expires_at > sa.bindparam("now", type_=UTCDateTime()),
        GRANT.c.rule == sa.bindparam("rule"),
        GRANT.c.submitted_by == sa.bindparam("submitted_by"),
        GRANT.c.approvals_required == sa.bindparam("approvals_required"),
    )
    .order_by(GRANT.c.expires_at.desc())
)

_LAST_USE = GRANT.c.uses + 1 >= GRANT.c.max_uses
#: one use of a counted grant; the last one ends it (`take_use`)
_TAKE = (
    sa.update(GRANT)
    .where(
        GRANT.c.id == sa.bindparam("grant_id"),
        GRANT.c.status == GrantStatus.active.value,
        GRANT.c.max_uses.is_not(None),
        GRANT.c.uses < GRANT.c.max_uses,
        GRANT.c.expires_at > sa.bindparam("now", type_=UTCDateTime()),
    )
    .values(
        uses=GRANT.c.uses + 1,
        status=sa.case((_LAST_USE, sa.bindparam("used_up")), else_=GRANT.c.status),
        ended_at=sa.case((_LAST_USE, sa.bindparam("now", type_=UTCDateTime())), else_=None),
    )
    .returning(GRANT.c.uses, GRANT.c.max_uses)
)


#: who approved a request
_APPROVERS = sa.select(VOTE.c.approver).where(
    VOTE.c.request_id == sa.bindparam("request_id"), VOTE.c.verdict == Verdict.approve.value
)


def list_grants(session: Session, *, active_only: bool, now: datetime) -> list[Grant]:
    """Grants, newest first."""
    stmt = select(Grant).order_by(col(Grant.created_at).desc()).limit(500)
    if active_only:
        stmt = stmt.where(col(Grant.status) == GrantStatus.active, col(Grant.expires_at) > now)
    return list(session.exec(stmt).all())


#: active grants whose time is up, at most `limit` (the expiry sweep ends them, see
#: `GateService.expire_due`)
DUE = (
    sa.select(GRANT.c.id)
    .where(
        GRANT.c.status == GrantStatus.active.value,
        GRANT.c.expires_at <= sa.bindparam("now", type_=UTCDateTime()),
    )
    .limit(sa.bindparam("limit"))
)


def count_active(session: Session, now: datetime) -> int:
    """Active grants right now."""
    return int(
        session.execute(
            sa.select(sa.func.count())
            .select_from(Grant)
            .where(col(Grant.status) == GrantStatus.active, col(Grant.expires_at) > now)
        ).scalar_one()
    )
