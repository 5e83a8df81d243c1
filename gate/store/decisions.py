"""The state machine's verbs: what a decision reads and writes, and how each database makes
the compare-and-set safe.

`gate.decisions.machine` decides (which status, which reason, which audit event); it reads and
writes through these verbs only, in the caller's transaction:

* `load_for_decision` / `load`: the request (and its votes) as a decision needs them;
* `cast_vote`: store an approver's verdict, new or changed;
* `compare_and_set`: move a pending request to a final status, returning `Won` (with the
  audit chain's head to chain the transition's event from) or `Lost` (the row, read again
  in place, as the writer that got in first left it);
* `move_deadline`, `set_outcome`, `end_grant`, `insert_request`, `use_grant`: the other
  compare-and-set writes;
* `audit_head` / `append_event` and `owe_card_updates` (`gate.store.outbox`): the writes
  that ride with every change.

Which statements a database runs is decided here, once per database, with the argument for
why they are correct beside them (`_SQLite`, `_PostgreSQL`). Both must guarantee the same
two things: exactly one of any number of racing compare-and-sets on a pending request wins
(double clicks, retries, a second replica, the expiry sweep), and every event of a request
is chained after the newest one (a fork of the chain is `gate audit verify` failing).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col

from gate.base.statuses import GrantStatus, RequestStatus
from gate.store import batch, direct, rows
from gate.store import grants as grant_rows
from gate.store.outbox import enqueue_updates as owe_card_updates
from gate.store.records import (
    UNREAD,
    VOTE_FIELDS,
    Guard,
    Head,
    RequestRow,
    Unread,
    VoteRow,
    first_vote_decides,
)
from gate.store.tables import ConfirmationRequest, Grant

__all__ = [
    "CHANGED_MEANWHILE",
    "Lost",
    "Won",
    "append_event",
    "audit_head",
    "cast_vote",
    "compare_and_set",
    "end_grant",
    "insert_request",
    "load",
    "load_for_decision",
    "lock_request",
    "move_deadline",
    "owe_card_updates",
    "set_outcome",
    "take_grant_use",
    "use_grant",
]


#: what a decision made on an optimistic read raises when another change of the request
#: committed after the read (`_PostgreSQL`): nothing was written; decide again, locked.
#: `gate_require` says so (`batch.Unmet`); so does a vote that collides with one committed
#: meanwhile (PostgreSQL runs a statement's parts in no set order, so the vote may be
#: written before the check fails)
CHANGED_MEANWHILE: tuple[type[Exception], ...] = (batch.Unmet, sa.exc.IntegrityError)


@dataclass(frozen=True, slots=True)
class Won:
    """The compare-and-set changed the row; the transition's event chains after `head`."""

    head: str | None


@dataclass(frozen=True, slots=True)
class Lost:
    """Another change got in first: the row was read again, in place, as it now is."""


class _SQLite:
    """SQLite: one writer at a time.

    Every write transaction begins `BEGIN IMMEDIATE` (`gate.store.db`), taking the database's
    write lock before its first read, so nothing another writer commits can land between a
    decision's read and its write: the row, its votes and the audit chain's head read inside
    the transaction are the newest, and a compare-and-set's row count says whether the row
    was still pending (and in time). No lock clause, no head function, no batch.

    A pending request one approval decides has no votes to read, so its head is not read
    up front either: it comes back with the compare-and-set (`RETURNING` a subquery on the
    audit table, evaluated by the UPDATE's own snapshot, which is the writer's).
    """

    @staticmethod
    def load(session: Session, request_id: str, optimistic: bool) -> RequestRow | None:
        return rows.read(session, request_id, lock=True)

    @staticmethod
    def compare_and_set(
        session: Session, req: RequestRow, params: dict[str, Any], guard: Guard
    ) -> Won | Lost:
        conn = session.connection()
        if req.audit_head is not UNREAD:  # read in this transaction, under the write lock
            changed = direct.execute(conn, rows.CAS[guard], params).rowcount
            return Won(_known(req.audit_head)) if changed == 1 else Lost()
        batch.before_reading(session, rows.AUDIT)
        # the rows returned are the rows changed (SQLite's row count is not, with RETURNING)
        found = direct.execute(conn, rows.CAS_HEAD["sqlite", guard], params).all()
        return Won(found[0].head) if found else Lost()


class _PostgreSQL:
    """PostgreSQL: many writers, a row lock, and one statement for a change's writes.

    Locked reads. `FOR UPDATE` takes the row's lock; a statement's snapshot predates its
    wait for the lock, so the head is read by `gate_audit_head` (migration 0007: VOLATILE,
    its query takes a snapshot of its own) on the row a materialised CTE locked
    (`rows.LOCK_WITH_HEAD`): an event the lock's last holder committed is seen. A row this
    transaction locked cannot change before it ends, so when it is pending and in time the
    compare-and-set is sure and rides with the trailing writes (`gate.store.batch`); without
    a batch it runs at once and its row count decides.

    Optimistic reads (a decision's first try). The row and its head are read without the
    lock and outside the transaction (`rows.READ_WITH_HEAD`, no `BEGIN`). A finished request
    cannot change any more. A pending one that one approval decides is changed by one
    statement holding the compare-and-set and every trailing write, whose compare-and-set
    re-reads the head under the row's lock (`rows.checked_cas_of`) and fails the whole
    statement through `gate_require` (migration 0008) unless the row is still pending, in
    time and its head is the one read: `batch.Unmet` is raised, nothing was written, and the
    caller decides again with the lock (`gate.decisions.deciding.decide`). A quorum's votes are
    counted under the lock, so such a row is read again with it.

    Unlocked reads (`load`: a cancel, an expiry). The head comes back with the
    compare-and-set, from `gate_audit_head`, whose snapshot is its own: a cancel or an
    expiry that waited for a reminder or an extension to commit chains after its event.
    """

    @staticmethod
    def load(session: Session, request_id: str, optimistic: bool) -> RequestRow | None:
        req = rows.read(session, request_id, lock=True, optimistic=optimistic)
        if req is not None and req.optimistic and _quorum(req):
            return rows.read(session, request_id, lock=True)
        return req

    @staticmethod
    def compare_and_set(
        session: Session, req: RequestRow, params: dict[str, Any], guard: Guard
    ) -> Won | Lost:
        sure = req.locked and req.status == RequestStatus.pending  # locked: its head was read
        in_time = guard != "before" or req.expires_at > params["before"]
        in_time &= guard != "deadline" or req.expires_at == params["deadline"]
        written = tuple(k for k in params if k not in ("req_id", "before", "deadline"))
        if (sure or req.optimistic) and in_time and batch.holding(session):
            if sure:
                batch.write(session, rows.cas_of(written, guard), params)
            else:  # the statement fails unless the row and its head are as read
                checked = rows.checked_cas_of(written, guard)
                batch.write(session, checked, {**params, "head": req.audit_head}, required=True)
            return Won(_known(req.audit_head))
        conn = session.connection()
        if req.audit_head is not UNREAD and not req.optimistic:  # read under the lock
            changed = direct.execute(conn, rows.CAS[guard], params).rowcount
            return Won(_known(req.audit_head)) if changed == 1 else Lost()
        batch.before_reading(session, rows.AUDIT)
        found = direct.execute(conn, rows.CAS_HEAD["postgresql", guard], params).all()
        return Won(found[0].head) if found else Lost()


_ALGORITHMS: dict[str, type[_SQLite] | type[_PostgreSQL]] = {
    "sqlite": _SQLite,
    "postgresql": _PostgreSQL,
}


def _algorithm(session: Session) -> type[_SQLite] | type[_PostgreSQL]:
    # the session's bind (the write connection, or the engine) names the database without
    # `session.connection()`'s transaction lookup
    bind = session.bind
    dialect = bind.dialect if bind is not None else session.connection().dialect
    return _ALGORITHMS[dialect.name]


def _quorum(req: RequestRow) -> bool:
    """A pending request whose votes a decision counts (a quorum, a rejection threshold, a
    vote filter or a chain's stages), under the row's lock."""
    return req.status == RequestStatus.pending and not _first_vote_decides(req)


def _first_vote_decides(req: RequestRow) -> bool:
    return first_vote_decides(req.approvals_required, req.options)


def _known(head: Head) -> str | None:
    """`head`, which the paths that rely on it have read (a bug otherwise, not a race)."""
    if isinstance(head, Unread):
        raise AssertionError("the audit chain's head is relied on before it was read")
    return head


def load_for_decision(
    session: Session, request_id: str, *, optimistic: bool = False
) -> tuple[RequestRow, list[VoteRow]] | None:
    """The request and its votes: all a decision reads (None when no request has that id).

    A pending request whose first vote decides it, either way, has no votes (one approval
    approves, one rejection rejects, no stage follows: `records.first_vote_decides`),
    so only its row is read; otherwise the votes and the audit chain's head are read
    at once, as of after the row's lock. `optimistic` (PostgreSQL) may read the row without
    its lock: see `_PostgreSQL`."""
    req = _algorithm(session).load(session, request_id, optimistic)
    if req is None:
        return None
    if req.status == RequestStatus.pending and _first_vote_decides(req):
        return req, []
    votes, req.audit_head = rows.votes_and_head(session, request_id, outside=req.optimistic)
    return req, votes


def load(session: Session, request_id: str, *, lock: bool = False) -> RequestRow | None:
    """The request's row (locked for the transaction with `lock`), or None."""
    return rows.read(session, request_id, lock=lock)


def cast_vote(
    session: Session, request_id: str, vote: VoteRow, *, replacing: VoteRow | None
) -> None:
    """Store `vote` on the request: a new row, or the changed columns of the approver's
    earlier vote `replacing` (updated in place)."""
    if replacing is None:
        fields = {name: getattr(vote, name) for name in VOTE_FIELDS if name != "id"}
        batch.write(session, rows.INSERT_VOTE, {"request_id": request_id, **fields})
        return
    changed = {name: getattr(vote, name) for name in VOTE_FIELDS if name not in ("id", "approver")}
    replacing.update(changed)
    batch.write(session, rows.UPDATE_VOTE, {"vote_id": replacing.id, **changed})


def compare_and_set(
    session: Session,
    req: RequestRow,
    written: dict[str, Any],
    *,
    before: datetime | None = None,
    deadline: datetime | None = None,
) -> Won | Lost:
    """Write `written` on `req` only while it is pending (`... AND status = 'pending'`); with
    `before`, only while its deadline is after that instant; with `deadline`, only while the
    deadline is still that one. On `Lost`, `req` is read again in place."""
    params = {**written, "req_id": req.id}
    guard: Guard = ""
    if before is not None:
        params["before"], guard = before, "before"
    elif deadline is not None:
        params["deadline"], guard = deadline, "deadline"
    result = _algorithm(session).compare_and_set(session, req, params, guard)
    if isinstance(result, Lost):
        rows.refresh(session, req)
    return result


def move_deadline(
    session: Session, request_id: str, *, until: datetime, now: datetime, seen: datetime | None
) -> bool:
    """Set a pending request's deadline to `until` while it is still after `now` (and, with
    `seen`, still `seen`); False when no row matched."""
    guards = [
        col(ConfirmationRequest.id) == request_id,
        col(ConfirmationRequest.status) == RequestStatus.pending,
        col(ConfirmationRequest.expires_at) > now,
    ]
    if seen is not None:
        guards.append(col(ConfirmationRequest.expires_at) == seen)
    result = session.execute(
        sa.update(ConfirmationRequest)
        .where(*guards)
        .values(expires_at=until)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def set_outcome(session: Session, request_id: str, outcome: str) -> bool:
    """Record what happened after approval, once: False unless the request is approved and
    has no outcome yet."""
    result = session.execute(
        sa.update(ConfirmationRequest)
        .where(
            col(ConfirmationRequest.id) == request_id,
            col(ConfirmationRequest.status) == RequestStatus.approved,
            col(ConfirmationRequest.outcome).is_(None),
        )
        .values(outcome=outcome)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def end_grant(session: Session, grant_id: str, written: dict[str, Any]) -> tuple[bool, str | None]:
    """Write `written` (the ending's status, time and actor, as the machine decided them)
    on a grant only while it is active (compare-and-set): whether it was, and the id of
    the request that approved it, locked for the transaction (its event joins that
    request's chain; None when the grant row is gone)."""
    result = session.execute(
        sa.update(Grant)
        .where(col(Grant.id) == grant_id, col(Grant.status) == GrantStatus.active)
        .values(written)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False, None
    grant = session.get(Grant, grant_id)
    if grant is None:
        return True, None
    # Under that request's lock, as every event of a request is, or an outcome reported at
    # the same instant would read the same head and fork the chain.
    rows.read(session, grant.request_id, lock=True)
    return True, grant.request_id


def insert_request(session: Session, req: RequestRow) -> None:
    """Write a new request row (with the change's batch)."""
    rows.insert_request(session, req)


def take_grant_use(
    session: Session, grant_id: str, *, now: datetime, used_up: str
) -> tuple[int, int] | None:
    """Take one use of a counted grant (`gate.store.grants.take_use`)."""
    return grant_rows.take_use(session, grant_id, now=now, used_up=used_up)


def lock_request(session: Session, request_id: str) -> Head | Unread:
    """Lock a request for the transaction (before an event joins its audit chain): its audit
    chain's head when the lock read it (PostgreSQL), else `UNREAD`."""
    found = rows.read(session, request_id, lock=True)
    return found.audit_head if found is not None else UNREAD


def use_grant(session: Session, grant_id: str) -> None:
    """Count one more call a grant let through."""
    batch.write(session, rows.USE_GRANT, {"grant_id": grant_id})


def audit_head(session: Session, request_id: str) -> str | None:
    """The newest event's chain hash of the request (None: no event yet)."""
    if session.new:  # an ORM row the next event may refer to must be written first
        session.flush()
    batch.before_reading(session, rows.AUDIT)  # an event the batch still holds is the head
    head = direct.execute(session.connection(), _HEAD, {"request_id": request_id}).scalar()
    return None if head is None else str(head)


def append_event(session: Session, values: dict[str, Any]) -> None:
    """Write one audit event (`request_id`, `at`, `kind`, `actor`, `via`, `detail`,
    `prev_hash`, `chain_hash`), with the change's batch."""
    if session.new:  # an ORM row this event may refer to must be written first
        session.flush()
    batch.write(session, _INSERT_EVENT, values)


_HEAD = (
    sa.select(rows.AUDIT.c.chain_hash)
    .where(rows.AUDIT.c.request_id == sa.bindparam("request_id"))
    .order_by(rows.AUDIT.c.id.desc())
    .limit(1)
)
#: its id is never read: no RETURNING on PostgreSQL
_EVENT_COLUMNS = ("request_id", "at", "kind", "actor", "via", "detail", "prev_hash", "chain_hash")
_INSERT_EVENT = batch.insert(rows.AUDIT, _EVENT_COLUMNS)
