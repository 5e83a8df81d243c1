"""The hot paths' SQL: Core statements built once, rows as plain objects.

A decision and an ask run a handful of statements each. Through the ORM every one of them
pays for the unit of work (identity map, flush ordering, attribute events, refresh) and for
a new statement object whose cache key is generated on each call. Here each statement is
built once at import with bind parameters, so SQLAlchemy finds its compiled form at once,
and rows come back as the typed `RequestRow`/`VoteRow` of `gate.store.records`.

Everything runs on the caller's connection, in the caller's transaction.
"""

from __future__ import annotations

import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session

from gate.store import batch, direct, records
from gate.store.records import GUARDS, UNREAD, VOTE_FIELDS, Guard, Head, RequestRow, VoteRow
from gate.store.tables import (
    AuditEvent,
    ConfirmationRequest,
    Delivery,
    Grant,
    SignInBucket,
    UTCDateTime,
    Vote,
)

REQUEST: sa.Table = ConfirmationRequest.__table__  # type: ignore[attr-defined]
VOTE: sa.Table = Vote.__table__  # type: ignore[attr-defined]
AUDIT: sa.Table = AuditEvent.__table__  # type: ignore[attr-defined]
DELIVERY: sa.Table = Delivery.__table__  # type: ignore[attr-defined]
GRANT: sa.Table = Grant.__table__  # type: ignore[attr-defined]
BUCKET: sa.Table = SignInBucket.__table__  # type: ignore[attr-defined]

#: every column of a request, in table order (what a `RequestRow` carries)
REQUEST_COLUMNS = tuple(c.name for c in REQUEST.columns)
_VOTE_COLUMNS = VOTE_FIELDS

_ID: sa.BindParameter[str] = sa.bindparam("id")


def _audit_head(request_id: Any) -> Any:
    """PostgreSQL: the request's audit chain head as of the moment it is evaluated
    (`gate_audit_head`, migration 0007: VOLATILE, so its query takes a snapshot of its own)."""
    return sa.func.gate_audit_head(request_id, type_=sa.String)


SELECT_REQUEST = sa.select(REQUEST).where(REQUEST.c.id == _ID)
#: PostgreSQL locks the row (`FOR UPDATE`); SQLite renders no lock clause, since its
#: writer's `BEGIN IMMEDIATE` already serialises writers
LOCK_REQUEST = SELECT_REQUEST.with_for_update()
#: PostgreSQL: the row locked, with its audit chain's head as of after the lock is held. A
#: statement's snapshot predates its wait for the lock, so a plain subquery could miss an
#: event the lock's holder wrote; `gate_audit_head` (migration 0007) is VOLATILE, so its
#: query takes a snapshot of its own, and it runs on the row the materialised CTE locked.
_LOCKED = LOCK_REQUEST.cte("locked").prefix_with("MATERIALIZED")
LOCK_WITH_HEAD = sa.select(_LOCKED, _audit_head(_LOCKED.c.id).label("audit_head"))
#: PostgreSQL: the row and its audit chain's head, unlocked (a decision's first read). What it
#: says is not trusted: the write's compare-and-set confirms it (`checked_cas_of`)
READ_WITH_HEAD = sa.select(REQUEST, _audit_head(REQUEST.c.id).label("audit_head")).where(
    REQUEST.c.id == _ID
)

_HEAD = (
    sa.select(AUDIT.c.chain_hash)
    .where(AUDIT.c.request_id == _ID)
    .order_by(AUDIT.c.id.desc())
    .limit(1)
    .scalar_subquery()
)
# One row at least (the anchor), however many votes: the chain head rides on every row.
_ANCHOR = sa.select(sa.literal(1).label("one")).subquery("anchor")
VOTES_AND_HEAD = (
    sa.select(_HEAD.label("head"), *(VOTE.c[name] for name in _VOTE_COLUMNS))
    .select_from(_ANCHOR.outerjoin(VOTE, VOTE.c.request_id == _ID))
    .order_by(VOTE.c.at, VOTE.c.id)
)
SELECT_VOTES = (
    sa.select(*(VOTE.c[name] for name in _VOTE_COLUMNS))
    .where(VOTE.c.request_id == _ID)
    .order_by(VOTE.c.at, VOTE.c.id)
)
#: a request and its votes in one statement (one row per vote, or one with no vote)
_VOTE_LABELS = tuple((name, f"vote_{name}") for name in _VOTE_COLUMNS)
WITH_VOTES = (
    sa.select(REQUEST, *(VOTE.c[name].label(label) for name, label in _VOTE_LABELS))
    .select_from(REQUEST.outerjoin(VOTE, VOTE.c.request_id == REQUEST.c.id))
    .where(REQUEST.c.id == _ID)
    .order_by(VOTE.c.at, VOTE.c.id)
)
#: the request a principal made under an idempotency key
BY_KEY = sa.select(REQUEST).where(
    REQUEST.c.idempotency_key == sa.bindparam("key"),
    REQUEST.c.submitted_by == sa.bindparam("submitted_by"),
)
#: pending requests whose deadline passed, oldest deadline first, at most `limit`
DUE_REQUESTS = (
    sa.select(REQUEST.c.id)
    .where(
        REQUEST.c.status == "pending",
        REQUEST.c.expires_at <= sa.bindparam("now", type_=REQUEST.c.expires_at.type),
    )
    .order_by(REQUEST.c.expires_at)
    .limit(sa.bindparam("limit"))
    .subquery("due_requests")
)
INSERT_REQUEST = batch.insert(REQUEST, REQUEST_COLUMNS)
#: nothing uses a new vote's id: no `RETURNING vote.id` (PostgreSQL) or lastrowid read
INSERT_VOTE = batch.insert(VOTE, ("request_id", *_VOTE_COLUMNS[1:]))
#: an approver's vote changed (by `vote_id`): every column of it but its id
UPDATE_VOTE = (
    sa.update(VOTE)
    .where(VOTE.c.id == sa.bindparam("vote_id"))
    .values({name: sa.bindparam(name, type_=VOTE.c[name].type) for name in _VOTE_COLUMNS[2:]})
)


#: a grant let one more call through
USE_GRANT = (
    sa.update(GRANT).where(GRANT.c.id == sa.bindparam("grant_id")).values(uses=GRANT.c.uses + 1)
)


def _cas(guard: Guard) -> sa.Update:
    """`UPDATE ... WHERE id = :req_id AND status = 'pending'` plus the deadline `guard`; the
    columns set are the parameters' keys."""
    guards = [REQUEST.c.id == sa.bindparam("req_id"), REQUEST.c.status == "pending"]
    if guard == "before":
        guards.append(REQUEST.c.expires_at > sa.bindparam("before", type_=UTCDateTime()))
    elif guard == "deadline":
        guards.append(REQUEST.c.expires_at == sa.bindparam("deadline", type_=UTCDateTime()))
    return sa.update(REQUEST).where(*guards)


#: every transition's compare-and-set (run by `gate.decisions.machine` alone, the only code that
#: changes a status), built once per deadline guard
CAS = {g: _cas(g) for g in GUARDS}
#: the same, returning the request's audit chain head as of after the UPDATE holds the row,
#: by database and deadline guard. SQLite: read by the UPDATE's own snapshot (its writer has
#: held the database since `BEGIN IMMEDIATE`). PostgreSQL: by `gate_audit_head`, whose
#: snapshot is its own, since the UPDATE's predates any wait for the row: a cancel or an
#: expiry that waited for a reminder or an extension to commit must chain after its event.
CAS_HEAD = {
    ("sqlite", g): _cas(g).returning(
        sa.select(AUDIT.c.chain_hash)
        .where(AUDIT.c.request_id == sa.bindparam("req_id"))
        .order_by(AUDIT.c.id.desc())
        .limit(1)
        .scalar_subquery()
        .label("head")
    )
    for g in GUARDS
}
CAS_HEAD |= {
    ("postgresql", g): _cas(g).returning(_audit_head(REQUEST.c.id).label("head")) for g in GUARDS
}


@functools.cache
def cas_of(written: tuple[str, ...], guard: Guard) -> sa.Update:
    """`CAS[guard]` setting exactly the columns `written`, each a bind parameter of its
    name (what a batch's parts need, see `gate.store.batch`); one statement per shape."""
    values = {name: sa.bindparam(name, type_=REQUEST.c[name].type) for name in written}
    return _cas(guard).values(values)


@functools.cache
def checked_cas_of(written: tuple[str, ...], guard: Guard) -> sa.Update:
    """`cas_of` for a row read without its lock (PostgreSQL, `read(optimistic=True)`),
    returning `ok`: whether the audit chain's head, read once the UPDATE holds the row's
    lock, is still `:head`. `gate_audit_head` takes a snapshot of its own (migration 0007),
    so it sees an event the lock's last holder committed even when that holder left the row
    as it was (the UPDATE then finds nothing to re-check). A batch part `required`: with no
    row or `ok` false the whole statement fails (`gate.store.batch`)."""
    head = _audit_head(REQUEST.c.id)
    expected = sa.bindparam("head", type_=sa.String)
    # Built anew, not from `cas_of`'s cached statement: SQLAlchemy memoizes a statement's
    # RETURNING columns the first time they are read (`exported_columns`, which
    # `gate.store.batch` and `gate.store.direct` read), and `.returning()` copies that memo
    # to the statement it makes, which then returns no `ok`.
    values = {name: sa.bindparam(name, type_=REQUEST.c[name].type) for name in written}
    checked = _cas(guard).values(values)
    return checked.returning(head.is_not_distinct_from(expected).label("ok"))


def request_row(mapping: Any, *, head: Head = UNREAD) -> RequestRow:
    """A `RequestRow` from a result row's mapping (every column of the request)."""
    return RequestRow(**mapping, audit_head=head)


def read(
    session: Session, request_id: str, *, lock: bool = False, optimistic: bool = False
) -> RequestRow | None:
    """The request's row (locked for this transaction with `lock`), or None.

    Locked on PostgreSQL, the row comes with its audit chain's head read after the lock
    (`audit_head`) and `locked` set: no other transaction can change it before this one
    ends, so its status and deadline are the ones a compare-and-set will find.

    `optimistic` (PostgreSQL, with `lock`): the row and its head are read without the lock
    and outside the transaction (no `BEGIN`), with `optimistic` set: a change built on them
    is made only if the compare-and-set finds both unchanged (`checked_cas_of`). SQLite's
    writer already holds its lock (`BEGIN IMMEDIATE`), so there it is a plain locked read.
    """
    conn = session.connection()
    if lock and conn.dialect.name == "postgresql":
        statement = READ_WITH_HEAD if optimistic else LOCK_WITH_HEAD
        found = direct.execute(conn, statement, {"id": request_id}, outside=optimistic).first()
        if found is None:
            return None
        mapping = found._mapping
        row = request_row(
            {name: mapping[name] for name in REQUEST_COLUMNS}, head=mapping["audit_head"]
        )
        row.locked, row.optimistic = not optimistic, optimistic
        return row
    found = direct.execute(
        conn, LOCK_REQUEST if lock else SELECT_REQUEST, {"id": request_id}
    ).first()
    return request_row(found._mapping) if found is not None else None


def refresh(session: Session, req: RequestRow) -> None:
    """Read `req`'s columns again (after a compare-and-set another writer won)."""
    found = direct.execute(session.connection(), SELECT_REQUEST, {"id": req.id}).one()
    req.update(dict(found._mapping))
    req.audit_head = UNREAD
    req.optimistic = False


def votes_and_head(
    session: Session, request_id: str, *, outside: bool = False
) -> tuple[list[VoteRow], str | None]:
    """The request's votes, oldest first, and its audit chain's head, in one statement
    (`outside` the transaction when it may be, see `direct.execute`)."""
    conn = session.connection()
    rows = direct.execute(conn, VOTES_AND_HEAD, {"id": request_id}, outside=outside).all()
    head = rows[0].head if rows else None
    votes = [VoteRow(**_vote_fields(r._mapping)) for r in rows if r.id is not None]
    return votes, head


def with_votes(conn: sa.Connection, request_id: str) -> tuple[RequestRow, list[VoteRow]] | None:
    """The request and its votes, oldest first, read in one statement; None if unknown."""
    found = direct.execute(conn, WITH_VOTES, {"id": request_id}).all()
    if not found:
        return None
    first = found[0]._mapping
    req = request_row({name: first[name] for name in REQUEST_COLUMNS})
    votes = [
        VoteRow(**{name: r._mapping[label] for name, label in _VOTE_LABELS})
        for r in found
        if r.vote_id is not None
    ]
    return req, votes


def votes(session: Session, request_id: str) -> list[VoteRow]:
    """The request's votes, oldest first."""
    rows = direct.execute(session.connection(), SELECT_VOTES, {"id": request_id}).all()
    return [VoteRow(**r._mapping) for r in rows]


def _vote_fields(mapping: Any) -> dict[str, Any]:
    return {name: mapping[name] for name in _VOTE_COLUMNS}


def insert_request(session: Session, req: RequestRow) -> None:
    """Write a new request row from every column `req` carries (with the change's batch)."""
    batch.write(session, INSERT_REQUEST, {k: getattr(req, k) for k in REQUEST_COLUMNS})


#: a request not yet written (`gate.store.records.new_request`)
new_request = records.new_request


# -- sign-in rate limits (gate.web.signin) ---------------------------------------------------

#: the buckets named, locked for the transaction (SQLite: its writer's lock serialises)
_LOCK_BUCKETS = (
    sa.select(BUCKET.c.key, BUCKET.c.tokens, BUCKET.c.at)
    .where(BUCKET.c.key.in_(sa.bindparam("keys", expanding=True)))
    .with_for_update()
)
_NEW_BUCKETS = {
    "postgresql": postgresql.insert(BUCKET).on_conflict_do_nothing(index_elements=["key"]),
    "sqlite": sqlite.insert(BUCKET).on_conflict_do_nothing(index_elements=["key"]),
}
_SET_BUCKET = (
    sa.update(BUCKET)
    .where(BUCKET.c.key == sa.bindparam("bucket"))
    .values(tokens=sa.bindparam("tokens"), at=sa.bindparam("at", type_=UTCDateTime()))
)
_DROP_IDLE_BUCKETS = sa.delete(BUCKET).where(
    BUCKET.c.at < sa.bindparam("idle_since", type_=UTCDateTime())
)


def lock_buckets(
    conn: sa.Connection, fresh: dict[str, float], at: Any, idle_since: Any
) -> dict[str, tuple[float, Any]]:
    """Each bucket of `fresh` (key: its tokens when new) as (tokens, as of when), locked for
    the transaction; buckets not kept yet are created full, and ones idle since before
    `idle_since` (full again by then) are dropped first."""
    conn.execute(_DROP_IDLE_BUCKETS, {"idle_since": idle_since})
    new = [{"key": key, "tokens": tokens, "at": at} for key, tokens in fresh.items()]
    # ON CONFLICT DO NOTHING: another replica may create the same bucket at the same time
    conn.execute(_NEW_BUCKETS[conn.dialect.name], new)
    found = conn.execute(_LOCK_BUCKETS, {"keys": list(fresh)}).all()
    return {row.key: (row.tokens, row.at) for row in found}


def set_buckets(conn: sa.Connection, tokens: dict[str, float], at: Any) -> None:
    """Write each bucket's tokens as of `at` (locked by `lock_buckets` in this transaction)."""
    conn.execute(_SET_BUCKET, [{"bucket": k, "tokens": t, "at": at} for k, t in tokens.items()])
