"""Sending a claimed delivery row through its channel.

`gate.store.outbox` owes and claims the rows; this sends one, its lease renewed meanwhile,
and has it marked sent, retried, dead or postponed (`gate.store.marks`, each in one
transaction). An update marked sent owes one more refresh, read back, when another update
of the same card may have landed after it (`mark_sent`), so a card ends on its request's
newest state even when replicas send in the other order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from gate.base.statuses import DeliveryKind, DeliveryStatus
from gate.store.marks import REFRESH_OWED as REFRESH_OWED
from gate.store.marks import give_up as give_up
from gate.store.marks import mark_failed as mark_failed
from gate.store.marks import mark_sent as mark_sent
from gate.store.marks import mark_superseded as mark_superseded
from gate.store.marks import post_ref as post_ref
from gate.store.marks import postpone as postpone
from gate.store.marks import release as release
from gate.store.outbox import HEARTBEAT, LEASE, Claimed, renew

if TYPE_CHECKING:
    from gate.decisions.readmodel import RequestView
    from gate.store.db import Database

log = logging.getLogger("gate.outbox")


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
    if claim.until is not None and claim.until - started < LEASE / 2:
        # it waited its turn for half a lease: still ours only if nobody retook it
        held = await run_sync(renew, db, claim, started)
        if held is None:
            log.info("delivery %s: its lease ran out and another replica took it", claim.id)
            return "taken"
        claim = held
    beat = asyncio.ensure_future(_keep(db, claim, now, run_sync))
    try:
        return await _attempt(db, claim, channel, view, now, run_sync, started, failed)
    finally:
        beat.cancel()


async def _keep(
    db: Database, claim: Claimed, now: Callable[[], datetime], run_sync: Callable[..., Any]
) -> None:
    """Renew `claim`'s lease every `HEARTBEAT` while its send is under way (cancelled when
    it ends): a send may outlast a lease, and only a dead replica's rows are retaken."""
    held: Claimed | None = claim
    while held is not None:
        await asyncio.sleep(HEARTBEAT.total_seconds())
        try:
            held = await run_sync(renew, db, held, now())
        except Exception as exc:  # the database away: the send goes on, the next beat retries
            log.warning("delivery %s: its lease could not be renewed: %r", claim.id, exc)
    log.warning("delivery %s: its lease was lost during the send", claim.id)


async def _attempt(
    db: Database,
    claim: Claimed,
    channel: Any,
    view: RequestView,
    now: Callable[[], datetime],
    run_sync: Callable[..., Any],
    started: datetime,
    failed: Callable[..., Awaitable[str]],
) -> str:
    """`deliver`'s send and its record, the lease kept meanwhile."""
    from gate.delivery.channel import DeliveryError

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
