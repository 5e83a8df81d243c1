"""Durable card deliveries: rows written in the deciding transaction, sent by a pump.

A `delivery` row is owed work: post a card, or refresh one already posted. The pump claims
due rows with a lease (`claimed_until`), using `FOR UPDATE SKIP LOCKED` on PostgreSQL so
replicas never claim the same row; a replica that dies mid-send leaves its lease to run out
and another picks the row up. A platform outage only delays cards: requests stay decidable
from the web page and the API the whole time.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlmodel import Session

from gate.base.statuses import DeliveryKind, DeliveryStatus
from gate.store import batch, direct
from gate.store.rows import DELIVERY
from gate.store.tables import UTCDateTime

if TYPE_CHECKING:
    from gate.store.db import Database

log = logging.getLogger(__name__)

#: a claim unrenewed this long is presumed dead (its replica was killed) and retaken: a row
#: held is renewed every `HEARTBEAT` while its send is under way (`gate.delivery.sending.deliver`),
#: and before its send if it waited half a lease for its turn, so a live replica keeps its
#: rows through three missed beats and a dead one's are retried within seconds
LEASE = timedelta(seconds=6)
HEARTBEAT = timedelta(seconds=2)
BATCH = 20


@dataclass(frozen=True)
class Claimed:
    """A delivery row this replica holds the lease on."""

    id: int
    request_id: str
    channel: str
    target: str
    kind: str
    attempts: int
    #: for an update: the posted card's message_ref and the status of its post row, read
    #: in the claiming transaction
    post_ref: str | None = None
    post_status: str | None = None
    #: the lease this replica holds it with (`claimed_until` as written): whoever renews it
    #: must find it unchanged, so a row another replica retook is not sent twice
    until: datetime | None = None


def _held(row: Any, until: datetime) -> Claimed:
    """A claim from the row a claiming statement returned, held until `until`."""
    return replace(Claimed(*row), until=until)


def hand_to_pump(session: Session, until: datetime) -> None:
    """Claim, in `session`'s own transaction, every delivery row it writes, leased until
    `until`: this replica's pump is running and will be handed them once it commits
    (`handed`), with the view the transaction built, instead of claiming them again in a
    transaction of its own and reading the request back. If this replica dies first, the
    lease runs out and any replica's pump takes the rows as usual."""
    session.info[_LEASE] = until


def enqueue_posts(
    session: Session, request_id: str, targets: list[tuple[str, str]], now: datetime
) -> None:
    """Owe one card post per (channel, target): one statement, however many (with the
    change's batch)."""
    if session.new:  # the request row these refer to may still be pending in the ORM
        session.flush()
    cards = list(dict.fromkeys(targets))
    if not cards:
        return
    until = session.info.get(_LEASE)
    params: dict[str, Any] = {"request_id": request_id, "now": now}
    for n, (channel, target) in enumerate(cards):
        params |= {f"channel_{n}": channel, f"target_{n}": target}
    if until is None:
        batch.write(session, _posts(len(cards), claimed=False), params)
    else:
        handed = session.info.setdefault(_HANDED, [])
        batch.write(
            session,
            _posts(len(cards), claimed=True),
            params | {"until": until},
            returned=lambda rows: handed.extend(_held(row, until) for row in rows),
        )
    session.info[_OWED] = True


_CLAIMED_COLUMNS = (
    DELIVERY.c.id,
    DELIVERY.c.request_id,
    DELIVERY.c.channel,
    DELIVERY.c.target,
    DELIVERY.c.kind,
    DELIVERY.c.attempts,
)


@cache
def _posts(cards: int, *, claimed: bool) -> Any:
    """One INSERT of `cards` card posts (`channel_<n>`, `target_<n>`) of one request; with
    `claimed`, leased until `:until` (their first attempt under way) and returned.

    `INSERT ... SELECT` of one row of parameters per card: SQLAlchemy caches its compiled
    form (it compiles a multi-row `VALUES` again on every call)."""
    now = sa.bindparam("now", type_=UTCDateTime())
    fixed: list[Any] = [
        sa.bindparam("request_id", type_=DELIVERY.c.request_id.type),
        sa.literal(DeliveryKind.post.value),
        sa.literal(DeliveryStatus.pending.value),
        sa.literal(1 if claimed else 0),  # attempts: a claimed row's first is under way
        now,
        now,
    ]
    if claimed:
        fixed.append(sa.bindparam("until", type_=UTCDateTime()))
    rows = [
        sa.select(
            *fixed,
            sa.bindparam(f"channel_{n}", type_=DELIVERY.c.channel.type),
            sa.bindparam(f"target_{n}", type_=DELIVERY.c.target.type),
        )
        for n in range(cards)
    ]
    columns = ["request_id", "kind", "status", "attempts", "next_attempt_at", "created_at"]
    columns += ["claimed_until"] if claimed else []
    insert = sa.insert(DELIVERY).from_select(
        [*columns, "channel", "target"], rows[0] if cards == 1 else sa.union_all(*rows)
    )
    return insert.returning(*_CLAIMED_COLUMNS) if claimed else insert


def enqueue_updates(session: Session, request_id: str, now: datetime) -> None:
    """Owe a refresh of every card posted (or still to be posted) for this request.

    One `INSERT ... SELECT`: the posts are copied into update rows by the database, so a
    decision pays one statement here whatever the number of cards (with the change's batch,
    after any post it holds). Claimed in the same statement when the transaction hands its
    rows to the pump (`hand_to_pump`); each then carries its card's `message_ref` as the
    post row had it.
    """
    params = {"request_id": request_id, "now": now}
    until = session.info.get(_LEASE)
    if until is None:
        # Owed whether or not there was a post to copy: an idle pump's claim finds nothing.
        batch.write(session, _COPY_POSTS, params, reads=DELIVERY)
        session.info[_OWED] = True
        return

    def claimed(rows: Sequence[Any]) -> None:
        # the 7th column: the card's post_ref
        claims = [_held(row, until) for row in rows]
        if claims:
            session.info.setdefault(_HANDED, []).extend(claims)
            session.info[_OWED] = True

    batch.write(
        session, _COPY_CLAIMED_POSTS, params | {"until": until}, returned=claimed, reads=DELIVERY
    )


#: set in `Session.info` by a transaction that owes card deliveries
_OWED = "gate_owes_cards"
#: in `Session.info`: the lease a transaction's delivery rows are claimed with, and the rows
_LEASE = "gate_outbox_lease"
_HANDED = "gate_outbox_handed"


def owes_cards(session: Session) -> bool:
    """True when `session`'s transaction added delivery rows (the pump has work)."""
    return bool(session.info.get(_OWED))


def handed(session: Session) -> list[Claimed]:
    """The rows `session`'s transaction wrote already claimed for this replica's pump."""
    claims: list[Claimed] = session.info.get(_HANDED, [])
    return claims


_WHEN = sa.bindparam("now", type_=UTCDateTime())


def _copy_posts(*, claimed: bool) -> Any:
    """INSERT ... SELECT: an update row per live post of the request; `claimed`, leased
    until `:until` with its card's `message_ref`, returned."""
    lease: list[Any] = [sa.bindparam("until", type_=UTCDateTime()), DELIVERY.c.message_ref]
    posts = sa.select(
        DELIVERY.c.request_id,
        DELIVERY.c.channel,
        DELIVERY.c.target,
        sa.literal(DeliveryKind.update.value),
        sa.literal(DeliveryStatus.pending.value),
        sa.literal(1 if claimed else 0),  # attempts: a claimed row's first is under way
        _WHEN,
        _WHEN,
        *(lease if claimed else []),
    ).where(
        DELIVERY.c.request_id == sa.bindparam("request_id"),
        DELIVERY.c.kind == DeliveryKind.post.value,
        DELIVERY.c.status != DeliveryStatus.dead.value,
    )
    columns = ["request_id", "channel", "target", "kind", "status", "attempts"]
    columns += ["next_attempt_at", "created_at"]
    if not claimed:
        return sa.insert(DELIVERY).from_select(columns, posts)
    columns += ["claimed_until", "message_ref"]
    copied = sa.insert(DELIVERY).from_select(columns, posts.order_by(DELIVERY.c.id))
    return copied.returning(*_CLAIMED_COLUMNS, DELIVERY.c.message_ref)


_COPY_POSTS = _copy_posts(claimed=False)
_COPY_CLAIMED_POSTS = _copy_posts(claimed=True)


_DUE = (
    sa.select(DELIVERY.c.id)
    .where(
        DELIVERY.c.status == DeliveryStatus.pending.value,
        DELIVERY.c.next_attempt_at <= sa.bindparam("now", type_=UTCDateTime()),
        sa.or_(
            DELIVERY.c.claimed_until.is_(None),
            DELIVERY.c.claimed_until < sa.bindparam("now", type_=UTCDateTime()),
        ),
    )
    .order_by(DELIVERY.c.id)
    .limit(sa.bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_CLAIM = (
    sa.update(DELIVERY)
    .where(DELIVERY.c.id.in_(_DUE.scalar_subquery()))
    .values(
        claimed_until=sa.bindparam("until", type_=UTCDateTime()),
        attempts=DELIVERY.c.attempts + 1,
    )
    .returning(*_CLAIMED_COLUMNS)
)


def claim_due(db: Database, now: datetime, limit: int = BATCH) -> list[Claimed]:
    """Take a lease on up to `limit` due rows and return them; an update comes with its
    card's post (`post_ref`, `post_status`), read right after the claim."""
    # The claim is its transaction's one statement (PostgreSQL sends it in autocommit, see
    # `direct.execute`): the pump runs it every interval on every replica, mostly to find
    # nothing. The posts are read after it, which can only find them newer.
    with db.write_conn() as conn:
        params = {"now": now, "until": now + LEASE, "limit": limit}
        rows = direct.execute(conn, _CLAIM, params, last=True).all()
    claims = sorted((_held(row, now + LEASE) for row in rows), key=lambda c: c.id)
    updated = list({c.request_id for c in claims if c.kind == DeliveryKind.update})
    posts: dict[tuple[str, str, str], tuple[str | None, str]] = {}
    if updated:  # (SQLite cannot correlate a subquery in RETURNING with the row)
        with db.read_conn() as conn:
            for post in conn.execute(_POSTS, {"ids": updated}):
                card = (post.request_id, post.channel, post.target)
                posts.setdefault(card, (post.message_ref, post.status))
    out = []
    for claim in claims:
        card = (claim.request_id, claim.channel, claim.target)
        found = posts.get(card) if claim.kind == DeliveryKind.update else None
        out.append(replace(claim, post_ref=found[0], post_status=found[1]) if found else claim)
    return out


_POSTS = (
    sa.select(
        DELIVERY.c.request_id,
        DELIVERY.c.channel,
        DELIVERY.c.target,
        DELIVERY.c.message_ref,
        DELIVERY.c.status,
    )
    .where(
        DELIVERY.c.request_id.in_(sa.bindparam("ids", expanding=True)),
        DELIVERY.c.kind == DeliveryKind.post.value,
    )
    .order_by(DELIVERY.c.id)
)


_RENEW = (
    sa.update(DELIVERY)
    .where(
        DELIVERY.c.id == sa.bindparam("row_id"),
        DELIVERY.c.status == DeliveryStatus.pending.value,
        DELIVERY.c.claimed_until == sa.bindparam("held", type_=UTCDateTime()),
    )
    .values(claimed_until=sa.bindparam("until", type_=UTCDateTime()))
)


def renew(db: Database, claim: Claimed, now: datetime) -> Claimed | None:
    """`claim` with its lease renewed from `now`, or None when the row is no longer held
    with it (another replica retook it after the lease ran out, or it is done)."""
    if claim.until is None:  # not claimed with a lease this replica knows
        return claim
    until = now + LEASE
    with db.write_conn() as conn:
        params = {"row_id": claim.id, "held": claim.until, "until": until}
        renewed = direct.execute(conn, _RENEW, params, last=True).rowcount
    return replace(claim, until=until) if renewed == 1 else None
