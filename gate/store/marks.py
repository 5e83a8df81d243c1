"""Recording what came of sending a claimed delivery row: its SQL.

`gate.store.outbox` owes and claims the rows; `gate.delivery.sending` sends one through its channel;
this marks it sent, retried, dead or postponed, each in one transaction. An update marked
sent owes one more refresh, read back, when another update of the same card may have landed
after it (`mark_sent`), so a card ends on its request's newest state even when replicas send
in the other order.
"""

from __future__ import annotations

import logging
import random
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from gate.base.statuses import DeliveryKind, DeliveryStatus
from gate.store import direct
from gate.store.outbox import Claimed
from gate.store.rows import DELIVERY
from gate.store.tables import UTCDateTime

if TYPE_CHECKING:
    from gate.store.db import Database

log = logging.getLogger("gate.outbox")

#: backoff caps at five minutes: long enough not to hammer a platform that is down,
#: short enough that a card still lands soon after it comes back
MAX_BACKOFF_SECONDS = 300.0
#: an update waiting for its card's first post re-checks this often
WAIT_FOR_POST = timedelta(seconds=2)
#: what `deliver` returns when the card was sent but may show an older state (`mark_sent`)
REFRESH_OWED = "sent, refresh owed"


_SAME_CARD = (  # bind names apart from the columns': an UPDATE's SET takes those
    DELIVERY.c.request_id == sa.bindparam("card_request"),
    DELIVERY.c.channel == sa.bindparam("card_channel"),
    DELIVERY.c.target == sa.bindparam("card_target"),
)


#: `_SAME_CARD`'s parameters, and the columns they stand for
_CARD_KEYS = ("card_request", "card_channel", "card_target")
_CARD_COLUMNS = ("request_id", "channel", "target")


def _card(claim: Claimed) -> dict[str, str]:
    return dict(zip(_CARD_KEYS, (claim.request_id, claim.channel, claim.target), strict=True))


_POST_REF = (
    sa.select(DELIVERY.c.message_ref, DELIVERY.c.status)
    .where(*_SAME_CARD, DELIVERY.c.kind == DeliveryKind.post.value)
    .order_by(DELIVERY.c.id)
    .limit(1)
)


def post_ref(db: Database, claim: Claimed) -> tuple[str | None, str | None]:
    """For an update: the posted card's (message_ref, status of its post row), now."""
    with db.read_conn() as conn:
        row = direct.execute(conn, _POST_REF, _card(claim)).first()
    return (row[0], row[1]) if row else (None, None)


_THIS_ROW = DELIVERY.c.id == sa.bindparam("row_id")
#: the columns it sets are the parameters' keys
_SET_ROW = sa.update(DELIVERY).where(_THIS_ROW)
_NOW = sa.bindparam("now", type_=UTCDateTime())
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
#: the update's own row says, in the same statement, whether another update of its card
#: may have landed after it: a newer one was sent already, or one was sent while this one
#: was on its way (possibly by another replica)
_UPDATE_SENT_CHECKED = _UPDATE_SENT.returning(DELIVERY.c.id, _OTHER_SENT.label("overtaken"))
#: one more refresh of the card, due now (read back just before it is sent)
_REFRESH_COLUMNS = ("kind", "status", "attempts", "next_attempt_at", "created_at", *_CARD_COLUMNS)
_REFRESH_ROW = sa.select(
    sa.literal(DeliveryKind.update.value),
    sa.literal(DeliveryStatus.pending.value),
    sa.literal(0),
    _NOW,
    _NOW,
    *(sa.cast(sa.bindparam(key), sa.String()) for key in _CARD_KEYS),
)
_OWE_REFRESH = sa.insert(DELIVERY).from_select(_REFRESH_COLUMNS, _REFRESH_ROW)


def _marked_on_card() -> sa.Select[Any]:
    """PostgreSQL's mark of a sent update, in one statement: (id, overtaken) per row marked.

    Marks of one card's updates may run at once on two replicas, and each must see the
    other: checked against the same snapshot, neither would. So the statement first moves
    the card's post row (`card`), waiting for it while another mark holds it, and
    PostgreSQL hands a statement that waited the row as the other mark left it. Its
    bookkeeping (the newest update marked sent, when the last one was marked) answers "was
    another update sent that may have landed after this one?" from that row alone. Only
    then are this row and the older refreshes it makes redundant marked (they join `card`),
    and the refresh owed, if any, is inserted by the same statement.
    """
    post = DELIVERY.c
    row_id = sa.bindparam("row_id", type_=sa.Integer())
    greatest, coalesce = sa.func.greatest, sa.func.coalesce
    card = (
        sa.update(DELIVERY)
        .where(*_SAME_CARD, post.kind == DeliveryKind.post.value)
        .values(
            newest_update_sent=greatest(coalesce(post.newest_update_sent, 0), row_id),
            update_marked_before=post.update_marked_at,
            update_marked_at=greatest(coalesce(post.update_marked_at, _NOW), _NOW),
        )
        .returning(post.request_id, post.newest_update_sent, post.update_marked_before)
        .cte("card")
    )
    started = sa.bindparam("started", type_=UTCDateTime())
    later = sa.func.coalesce(card.c.update_marked_before > started, False)
    overtaken = sa.or_(card.c.newest_update_sent > row_id, later)
    marked = (
        _UPDATE_SENT.where(card.c.request_id == post.request_id)  # after the card's row
        .returning(post.id, overtaken.label("overtaken"))
        .cte("marked")
    )
    refresh = _REFRESH_ROW.where(marked.c.id == row_id, marked.c.overtaken)
    owed = sa.insert(DELIVERY).from_select(_REFRESH_COLUMNS, refresh).cte("owed")
    return sa.select(marked.c.id, marked.c.overtaken).add_cte(owed)


_MARKED_ON_CARD = _marked_on_card()


_POSTPONE = (
    sa.update(DELIVERY)
    .where(_THIS_ROW)
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
        return _marked_alone(db, claim, now, ref)
    params = {**_card(claim), "row_id": claim.id, "now": now, "ref": ref}
    params["started"] = started or now
    if not db.sqlite:
        with db.write_conn() as conn:
            marked = direct.execute(conn, _MARKED_ON_CARD, params, last=True).all()
        if marked:
            return any(row.overtaken for row in marked if row.id == claim.id)
        # no post row to take turns on (gone with its request, say): nothing to refresh
        return _marked_alone(db, claim, now, ref)
    with db.write_conn() as conn:
        # SQLite has one writer at a time: no other mark can run between the check and this
        marked = direct.execute(conn, _UPDATE_SENT_CHECKED, params).all()
        overtaken = any(row.overtaken for row in marked if row.id == claim.id)
        if overtaken:
            direct.execute(conn, _OWE_REFRESH, params)
    return overtaken


def _marked_alone(db: Database, claim: Claimed, now: datetime, ref: str | None) -> bool:
    """Mark one row sent by itself (no other row of its card to check); nothing is owed."""
    _write_one(db, _SET_ROW, _sent(claim, now) | {"message_ref": ref, "last_error": None})
    return False


def mark_superseded(db: Database, claim: Claimed, now: datetime) -> None:
    """Record an update as not needed: a later update of its card was already sent."""
    _write_one(db, _SET_ROW, _sent(claim, now) | {"last_error": _SUPERSEDED})


def _write_one(db: Database, statement: sa.Executable, params: dict[str, Any]) -> None:
    """One statement as a transaction of its own (PostgreSQL: sent in autocommit, no BEGIN
    and COMMIT round trips; see `direct.execute`)."""
    with db.write_conn() as conn:
        direct.execute(conn, statement, params, last=True)


def _sent(claim: Claimed, now: datetime) -> dict[str, Any]:
    """`_SET_ROW`'s parameters for a row done with: sent now, lease given back."""
    sent = DeliveryStatus.sent.value
    return {"row_id": claim.id, "status": sent, "sent_at": now, "claimed_until": None}


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
    _write_one(
        db,
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
    _write_one(db, _POSTPONE, {"row_id": claim.id, "when": now + WAIT_FOR_POST})


def give_up(db: Database, claim: Claimed, error: str) -> None:
    """Mark a row dead without retrying (its card can never be posted)."""
    dead = {"status": DeliveryStatus.dead.value, "last_error": error[:2000]}
    _write_one(db, _SET_ROW, {"row_id": claim.id, **dead, "claimed_until": None})
