"""Durable card deliveries: rows written in the deciding transaction, sent by a pump.

A `delivery` row is owed work: post a card, or refresh one already posted. The pump claims
due rows with a lease (`claimed_until`), using `FOR UPDATE SKIP LOCKED` on PostgreSQL so
replicas never claim the same row; a replica that dies mid-send leaves its lease to run out
and another picks the row up. A platform outage only delays cards: requests stay decidable
from the web page and the API the whole time.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlmodel import Session

from gate.models import DeliveryKind, DeliveryStatus, UTCDateTime
from gate.rows import DELIVERY

if TYPE_CHECKING:
    from gate.db import Database
    from gate.readmodel import RequestView

log = logging.getLogger(__name__)

#: a send should take well under this; past it the claim is presumed dead and retaken
LEASE = timedelta(seconds=60)
#: backoff caps at five minutes: long enough not to hammer a platform that is down,
#: short enough that a card still lands soon after it comes back
MAX_BACKOFF_SECONDS = 300.0
#: an update waiting for its card's first post re-checks this often
WAIT_FOR_POST = timedelta(seconds=2)
BATCH = 20
#: what `deliver` returns when the card was sent but may show an older state (`mark_sent`)
REFRESH_OWED = "sent, refresh owed"


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
    """Owe one card post per (channel, target): one statement, however many."""
    if session.new:  # the request row these refer to may still be pending in the ORM
        session.flush()
    rows = [
        {"request_id": request_id, "channel": channel, "target": target}
        | {"next_attempt_at": now, "created_at": now}
        for channel, target in dict.fromkeys(targets)
    ]
    if not rows:
        return
    until = session.info.get(_LEASE)
    if until is None:
        session.connection().execute(_INSERT_POST, rows)
    else:
        claimed = [row | {"claimed_until": until} for row in rows]
        written = session.connection().execute(_INSERT_CLAIMED_POST, claimed)
        session.info.setdefault(_HANDED, []).extend(Claimed(*row) for row in written)
    session.info[_OWED] = True


_INSERT_POST = sa.insert(DELIVERY).values(
    kind=DeliveryKind.post.value,
    status=DeliveryStatus.pending.value,
    attempts=0,
)
_CLAIMED_COLUMNS = (
    DELIVERY.c.id,
    DELIVERY.c.request_id,
    DELIVERY.c.channel,
    DELIVERY.c.target,
    DELIVERY.c.kind,
    DELIVERY.c.attempts,
)
#: a post claimed by the transaction that owes it: its first attempt is under way
_INSERT_CLAIMED_POST = (
    sa.insert(DELIVERY)
    .values(kind=DeliveryKind.post.value, status=DeliveryStatus.pending.value, attempts=1)
    .returning(*_CLAIMED_COLUMNS)
)


def enqueue_updates(session: Session, request_id: str, now: datetime) -> None:
    """Owe a refresh of every card posted (or still to be posted) for this request.

    One `INSERT ... SELECT`: the posts are copied into update rows by the database, so a
    decision pays one statement here whatever the number of cards. Claimed in the same
    statement when the transaction hands its rows to the pump (`hand_to_pump`); each then
    carries its card's `message_ref` as the post row had it.
    """
    params = {"request_id": request_id, "now": now}
    until = session.info.get(_LEASE)
    if until is None:
        copied = session.connection().execute(_COPY_POSTS, params)
        if copied.rowcount:
            session.info[_OWED] = True
        return
    written = session.connection().execute(_COPY_CLAIMED_POSTS, params | {"until": until})
    claims = [Claimed(*row) for row in written]  # the 7th column: the card's post_ref
    if claims:
        session.info.setdefault(_HANDED, []).extend(claims)
        session.info[_OWED] = True


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
_COPIED = ["request_id", "channel", "target", "kind", "status", "attempts"]
_COPY_POSTS = sa.insert(DELIVERY).from_select(
    [*_COPIED, "next_attempt_at", "created_at"],
    sa.select(
        DELIVERY.c.request_id,
        DELIVERY.c.channel,
        DELIVERY.c.target,
        sa.literal(DeliveryKind.update.value),
        sa.literal(DeliveryStatus.pending.value),
        sa.literal(0),
        _WHEN,
        _WHEN,
    ).where(
        DELIVERY.c.request_id == sa.bindparam("request_id"),
        DELIVERY.c.kind == DeliveryKind.post.value,
        DELIVERY.c.status != DeliveryStatus.dead.value,
    ),
)
_COPY_CLAIMED_POSTS = (
    sa.insert(DELIVERY)
    .from_select(
        [*_COPIED, "next_attempt_at", "created_at", "claimed_until", "message_ref"],
        sa.select(
            DELIVERY.c.request_id,
            DELIVERY.c.channel,
            DELIVERY.c.target,
            sa.literal(DeliveryKind.update.value),
            sa.literal(DeliveryStatus.pending.value),
            sa.literal(1),
            _WHEN,
            _WHEN,
            sa.bindparam("until", type_=UTCDateTime()),
            DELIVERY.c.message_ref,
        )
        .where(
            DELIVERY.c.request_id == sa.bindparam("request_id"),
            DELIVERY.c.kind == DeliveryKind.post.value,
            DELIVERY.c.status != DeliveryStatus.dead.value,
        )
        .order_by(DELIVERY.c.id),
    )
    .returning(*_CLAIMED_COLUMNS, DELIVERY.c.message_ref)
)


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
    .returning(
        DELIVERY.c.id,
        DELIVERY.c.request_id,
        DELIVERY.c.channel,
        DELIVERY.c.target,
        DELIVERY.c.kind,
        DELIVERY.c.attempts,
    )
)


def claim_due(db: Database, now: datetime, limit: int = BATCH) -> list[Claimed]:
    """Take a lease on up to `limit` due rows and return them; an update comes with its
    card's post (`post_ref`, `post_status`), read in the same transaction."""
    with db.write_conn() as conn:
        rows = conn.execute(_CLAIM, {"now": now, "until": now + LEASE, "limit": limit}).all()
        claims = sorted((Claimed(*row) for row in rows), key=lambda c: c.id)
        updated = list({c.request_id for c in claims if c.kind == DeliveryKind.update})
        posts: dict[tuple[str, str, str], tuple[str | None, str]] = {}
        if updated:  # (SQLite cannot correlate a subquery in RETURNING with the row)
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


_SAME_CARD = (  # bind names apart from the columns': an UPDATE's SET takes those
    DELIVERY.c.request_id == sa.bindparam("card_request"),
    DELIVERY.c.channel == sa.bindparam("card_channel"),
    DELIVERY.c.target == sa.bindparam("card_target"),
)


def _card(claim: Claimed) -> dict[str, str]:
    return {
        "card_request": claim.request_id,
        "card_channel": claim.channel,
        "card_target": claim.target,
    }


_POST_REF = (
    sa.select(DELIVERY.c.message_ref, DELIVERY.c.status)
    .where(*_SAME_CARD, DELIVERY.c.kind == DeliveryKind.post.value)
    .order_by(DELIVERY.c.id)
    .limit(1)
)


def post_ref(db: Database, claim: Claimed) -> tuple[str | None, str | None]:
    """For an update: the posted card's (message_ref, status of its post row), now."""
    with db.read_conn() as conn:
        row = conn.execute(_POST_REF, _card(claim)).first()
    return (row[0], row[1]) if row else (None, None)


#: the columns each of these sets are the parameters' keys
_SET_ROW = sa.update(DELIVERY).where(DELIVERY.c.id == sa.bindparam("row_id"))
_NOW = sa.bindparam("now", type_=UTCDateTime())
_THIS_ROW = DELIVERY.c.id == sa.bindparam("row_id")
_SUPERSEDED = "superseded by a later update"
#: an update sent: this row, and the older refreshes of its card still waiting (redundant
#: now), in one statement
_UPDATE_SENT = (
    sa.update(DELIVERY)
    .where(
        sa.or_(
            _THIS_ROW,
            sa.and_(
                *_SAME_CARD,
                DELIVERY.c.kind == DeliveryKind.update.value,
                DELIVERY.c.status == DeliveryStatus.pending.value,
                DELIVERY.c.id < sa.bindparam("row_id"),
                sa.or_(DELIVERY.c.claimed_until.is_(None), DELIVERY.c.claimed_until < _NOW),
            ),
        )
    )
    .values(
        status=DeliveryStatus.sent.value,
        sent_at=_NOW,
        claimed_until=None,
        message_ref=sa.case((_THIS_ROW, sa.bindparam("ref")), else_=DELIVERY.c.message_ref),
        last_error=sa.case((_THIS_ROW, sa.null()), else_=sa.literal(_SUPERSEDED)),
    )
)
_OTHER_SENT = (
    sa.select(DELIVERY.c.id)
    .where(
        *_SAME_CARD,
        DELIVERY.c.kind == DeliveryKind.update.value,
        DELIVERY.c.status == DeliveryStatus.sent.value,
        DELIVERY.c.last_error.is_(None),  # really sent, not superseded
        DELIVERY.c.id != sa.bindparam("row_id"),
        sa.or_(
            DELIVERY.c.id > sa.bindparam("row_id"),
            DELIVERY.c.sent_at > sa.bindparam("started", type_=UTCDateTime()),
        ),
    )
    .exists()
)
#: one more refresh of the card, due now, when another update of it may have landed after
#: this one: a newer one was sent already, or one was sent while this one was on its way
_HEAL = sa.insert(DELIVERY).from_select(
    [*_COPIED, "next_attempt_at", "created_at"],
    sa.select(
        sa.bindparam("card_request"),
        sa.bindparam("card_channel"),
        sa.bindparam("card_target"),
        sa.literal(DeliveryKind.update.value),
        sa.literal(DeliveryStatus.pending.value),
        sa.literal(0),
        _NOW,
        _NOW,
    ).where(_OTHER_SENT),
)
_POSTPONE = (
    sa.update(DELIVERY)
    .where(DELIVERY.c.id == sa.bindparam("row_id"))
    .values(
        claimed_until=None,
        attempts=DELIVERY.c.attempts - 1,
        next_attempt_at=sa.bindparam("when", type_=UTCDateTime()),
    )
)


def mark_sent(
    db: Database, claim: Claimed, now: datetime, ref: str | None, started: datetime | None = None
) -> bool:
    """Record success; older pending updates of the same card are now redundant.

    For an update sent since `started`: if another update of the card was sent that may
    have landed after it (a newer one, or one sent meanwhile, possibly by another replica),
    the card could now show an older state than the request's, so one more refresh is owed,
    read just before it is sent. Returns True when that refresh was added.
    """
    if claim.kind != DeliveryKind.update:
        sent = {"status": DeliveryStatus.sent.value, "sent_at": now, "claimed_until": None}
        row = {"row_id": claim.id, "message_ref": ref, "last_error": None}
        with db.write_conn() as conn:
            conn.execute(_SET_ROW, {**row, **sent})
        return False
    params = {**_card(claim), "row_id": claim.id, "now": now, "ref": ref}
    with db.write_conn() as conn:
        conn.execute(_UPDATE_SENT, params)
        healed = conn.execute(_HEAL, {**params, "started": started or now}).rowcount
    return bool(healed)


def mark_superseded(db: Database, claim: Claimed, now: datetime) -> None:
    """Record an update as not needed: a later update of its card was already sent."""
    superseded = {"status": DeliveryStatus.sent.value, "sent_at": now, "claimed_until": None}
    with db.write_conn() as conn:
        last = {"last_error": "superseded by a later update"}
        conn.execute(_SET_ROW, {"row_id": claim.id, **superseded, **last})


_RELEASE = (
    sa.update(DELIVERY)
    .where(DELIVERY.c.id.in_(sa.bindparam("ids", expanding=True)))
    .where(DELIVERY.c.status == DeliveryStatus.pending.value)
    .values(claimed_until=None, attempts=DELIVERY.c.attempts - 1)
)


def release(db: Database, claims: list[Claimed]) -> None:
    """Give back the lease of claimed rows never attempted, so any pump takes them now."""
    with db.write_conn() as conn:
        conn.execute(_RELEASE, {"ids": [claim.id for claim in claims]})


def mark_failed(
    db: Database,
    claim: Claimed,
    now: datetime,
    error: str,
    *,
    permanent: bool,
    retry_after: float | None,
    max_attempts: int,
) -> bool:
    """Record a failure; schedule a retry or mark the row dead. True when dead."""
    dead = permanent or claim.attempts >= max_attempts
    if retry_after is not None:
        delay = retry_after
    else:
        # Exponential backoff with jitter: 1, 2, 4 ... seconds, capped; the jitter keeps a
        # fleet of replicas from retrying a recovering platform in lockstep.
        delay = min(2.0 ** (claim.attempts - 1), MAX_BACKOFF_SECONDS) * random.uniform(0.75, 1.0)
    status = DeliveryStatus.dead if dead else DeliveryStatus.pending
    with db.write_conn() as conn:
        conn.execute(
            _SET_ROW,
            {
                "row_id": claim.id,
                "status": status.value,
                "last_error": error[:2000],
                "claimed_until": None,
                "next_attempt_at": now + timedelta(seconds=delay),
            },
        )
    return dead


def postpone(db: Database, claim: Claimed, now: datetime) -> None:
    """Give an update back unattempted: its card has not been posted yet."""
    with db.write_conn() as conn:
        conn.execute(_POSTPONE, {"row_id": claim.id, "when": now + WAIT_FOR_POST})


def give_up(db: Database, claim: Claimed, error: str) -> None:
    """Mark a row dead without retrying (its card can never be posted)."""
    dead = {"status": DeliveryStatus.dead.value, "last_error": error[:2000]}
    with db.write_conn() as conn:
        conn.execute(_SET_ROW, {"row_id": claim.id, **dead, "claimed_until": None})


def _log_failure(claim: Claimed, error: str, *, dead: bool) -> None:
    log.log(
        logging.ERROR if dead else logging.WARNING,
        "delivery %s (%s %s to %s:%s) %s: %s",
        *(claim.id, claim.kind, claim.request_id, claim.channel, claim.target),
        "dead" if dead else "will retry",
        error,
    )


async def deliver(
    db: Database,
    claim: Claimed,
    *,
    channels: dict[str, Any],
    view: RequestView | None,
    now: Callable[[], datetime],
    max_attempts: int,
    run_sync: Callable[..., Any],
) -> str:
    """Send one claimed row through its channel; returns what happened, for logs and tests."""
    from gate.channel import DeliveryError

    channel = channels.get(claim.channel)
    if channel is None or view is None:
        why = (
            f"channel {claim.channel!r} is not configured"
            if channel is None
            else "request no longer exists"
        )
        await run_sync(give_up, db, claim, why)
        log.error("delivery %s dead: %s", claim.id, why)
        return "dead"

    async def failed(error: str, *, permanent: bool, retry_after: float | None) -> str:
        mark = partial(mark_failed, db, claim, now(), error, max_attempts=max_attempts)
        dead = await run_sync(partial(mark, permanent=permanent, retry_after=retry_after))
        _log_failure(claim, error, dead=dead)
        return "dead" if dead else "retry"

    started = now()
    try:
        if claim.kind == DeliveryKind.post:
            ref: str | None = await channel.post(view, claim.target)
        else:
            ref, post_status = claim.post_ref, claim.post_status
            if ref is None and post_status != DeliveryStatus.dead:
                # not posted when claimed: perhaps by now (its post may have been in this batch)
                ref, post_status = await run_sync(post_ref, db, claim)
            if ref is None:
                if post_status == DeliveryStatus.dead:
                    await run_sync(give_up, db, claim, "the card was never posted")
                    return "dead"
                await run_sync(postpone, db, claim, now())
                return "postponed"
            await channel.update(view, claim.target, ref)
    except DeliveryError as exc:
        return await failed(str(exc), permanent=exc.permanent, retry_after=exc.retry_after)
    except Exception as exc:  # a channel bug must not kill the pump; retry like an outage
        log.exception("delivery %s raised", claim.id)
        return await failed(f"{type(exc).__name__}: {exc}", permanent=False, retry_after=None)
    if await run_sync(mark_sent, db, claim, now(), ref, started):
        return REFRESH_OWED
    return "sent"
