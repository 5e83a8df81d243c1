"""Outbox claims under contention: replicas racing for due rows never take the same one."""

from __future__ import annotations

import threading
from datetime import timedelta

import sqlalchemy as sa

from gate.base.statuses import DeliveryKind, RequestStatus, utcnow
from gate.store import outbox
from gate.store.db import Database, upgrade
from gate.store.tables import ConfirmationRequest, Delivery

ROWS = 400
WORKERS = 6


def _seed(db: Database) -> None:
    now = utcnow()
    with db.write() as session:
        req = ConfirmationRequest(
            tool_name="ask_x",
            status=RequestStatus.pending,
            created_at=now,
            expires_at=now + timedelta(minutes=5),
        )
        session.add(req)
        session.flush()
        for n in range(ROWS):
            session.add(
                Delivery(
                    request_id=req.id,
                    channel="log",
                    target=f"t{n}",
                    kind=DeliveryKind.post,
                    next_attempt_at=now,
                    created_at=now,
                )
            )


def test_concurrent_claims_are_disjoint_and_complete(db_url: str) -> None:
    upgrade(db_url)
    # Several engines stand in for several replicas, each with its own pool.
    dbs = [Database(db_url, pool_size=2) for _ in range(3)]
    try:
        _seed(dbs[0])
        claimed: list[list[int]] = [[] for _ in range(WORKERS)]
        start = threading.Barrier(WORKERS)

        def work(n: int) -> None:
            db = dbs[n % len(dbs)]
            start.wait()
            while batch := outbox.claim_due(db, utcnow(), limit=7):
                claimed[n].extend(c.id for c in batch)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        every = [i for ids in claimed for i in ids]
        assert len(every) == len(set(every)) == ROWS
        with dbs[0].read() as session:
            attempts = session.execute(sa.select(sa.func.max(Delivery.attempts))).scalar()
        assert attempts == 1  # nobody incremented a row someone else held
    finally:
        for db in dbs:
            db.dispose()


def test_an_expired_lease_is_taken_over(db_url: str) -> None:
    upgrade(db_url)
    db = Database(db_url)
    try:
        _seed(db)
        now = utcnow()
        first = outbox.claim_due(db, now, limit=ROWS)
        assert len(first) == ROWS
        # A replica that died mid-send: until its lease runs out nobody else sends the row...
        assert outbox.claim_due(db, now + outbox.LEASE - timedelta(seconds=1)) == []
        # ...and then another replica picks it up, with the attempt counted.
        again = outbox.claim_due(db, now + outbox.LEASE + timedelta(seconds=1), limit=ROWS)
        assert sorted(c.id for c in again) == sorted(c.id for c in first)
        assert {c.attempts for c in again} == {2}
    finally:
        db.dispose()
