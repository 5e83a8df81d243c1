"""Cards handed to this replica's pump by the transaction that owes them.

With the pump running, a change claims the delivery rows it writes in its own transaction
and hands them over after the commit, a new card's post with the view the change built: no
claim transaction, and no request read back for a post. These tests pin what that costs,
that the card shows what was written, that a newer card state is never overwritten by an
older one handed over late, and that rows a stopped pump cannot send go back to every
replica at once (or after the lease if the process died holding them).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gate.base.statuses import Verdict
from gate.decisions import deciding
from gate.decisions.readmodel import RequestView
from gate.decisions.service import GateService
from gate.delivery import sending
from gate.delivery.jobs import Jobs
from gate.store import outbox
from gate.store.tables import Delivery
from tests.core.conftest import Clock, approver, ask, service_of
from tests.support import config as cfg
from tests.support.servers import wait_until
from tests.support.sql_counter import counting, per_database


class ShownCards:
    """A channel that keeps what each card showed (the port, no platform behind it)."""

    name = "log"

    def __init__(self) -> None:
        self.shown: list[tuple[str, str, str]] = []  # (post|update, request id, status)

    async def post(self, req: RequestView, target: str) -> str:
        self.shown.append(("post", req.id, req.status))
        return f"card-{req.id}"

    async def update(self, req: RequestView, target: str, ref: str) -> None:
        assert ref == f"card-{req.id}"
        self.shown.append(("update", req.id, req.status))

    def router(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class HeldPump:
    """A running pump that keeps what it is handed, so a test chooses when it arrives."""

    def __init__(self) -> None:
        self.rows: list[tuple[outbox.Claimed, RequestView | None]] = []

    def accepting(self) -> bool:
        return True

    def hand_over(self, rows: list[tuple[outbox.Claimed, RequestView | None]]) -> None:
        self.rows.extend(rows)


@pytest.fixture
def service(db_url: str, clock: Clock) -> Iterator[GateService]:
    # the pump's own claim runs at most once an hour here: a slow test machine must not
    # have a scheduled claim send what a test is about to look at
    svc = service_of(cfg.settings_data(db_url, outbox_interval_seconds=3600), clock)
    yield svc
    svc.db.dispose()


@pytest.fixture
def cards() -> ShownCards:
    return ShownCards()


@pytest.fixture
def jobs(service: GateService, cards: ShownCards, clock: Clock) -> Iterator[Jobs]:
    service.configured_channels = service.settings.channels.configured()  # log: one card
    jobs = Jobs(service, {"log": cards}, clock)  # type: ignore[dict-item]
    jobs.running = lambda: True
    service.pump = jobs
    asyncio.run(jobs.pump_outbox())  # a claim just ran: the next run sends only what it is handed
    yield jobs


def pump(jobs: Jobs) -> int:
    return asyncio.run(jobs.pump_outbox(claim=False))


def rows(service: GateService) -> list[tuple[str, str, int, bool, str | None]]:
    """(kind, status, attempts, claimed?, last_error) of every delivery row, oldest first."""
    with service.db.read() as session:
        found = session.execute(sa.select(Delivery).order_by(Delivery.id)).scalars().all()  # type: ignore[arg-type]
        return [
            (d.kind, d.status, d.attempts, d.claimed_until is not None, d.last_error) for d in found
        ]


def test_an_ask_claims_its_card_and_the_pump_sends_it_without_reading(
    service: GateService, jobs: Jobs, cards: ShownCards
) -> None:
    with counting(service.db.engine) as tally:
        rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    # claimed in the insert (on PostgreSQL the request, its event and its card are one)
    statements = per_database(service.db.engine, sqlite=4, postgres=2)
    assert (tally.count, tally.transactions) == (statements, 1), str(tally)
    assert rows(service) == [("post", "pending", 1, True, None)]
    assert outbox.claim_due(service.db, service.clock()) == []  # no other pump takes it
    with counting(service.db.engine) as tally:
        assert pump(jobs) == 1
    # only marking it sent: no claim, no read of the request
    assert (tally.count, tally.transactions) == (1, 1), str(tally)
    assert cards.shown == [("post", rid, "pending")]
    assert rows(service) == [("post", "sent", 1, False, None)]


def test_a_decision_hands_its_refresh_over_with_the_decided_view(
    service: GateService, jobs: Jobs, cards: ShownCards
) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    pump(jobs)
    with counting(service.db.engine) as tally:
        deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    # claimed in the copy (on PostgreSQL the transition, the vote, its event and the copy
    # are one statement after the lock)
    statements = per_database(service.db.engine, sqlite=5, postgres=2)
    assert (tally.count, tally.transactions) == (statements, 1), str(tally)
    assert outbox.claim_due(service.db, service.clock()) == []
    with counting(service.db.engine) as tally:
        assert pump(jobs) == 1
    # marked sent with older pending refreshes superseded and the check that no other
    # refresh of the card may have landed after it, in one statement (on PostgreSQL it
    # takes its turn on the card's post row first, in the same statement); no claim, no read
    assert (tally.count, tally.transactions) == (1, 1), str(tally)
    assert cards.shown == [("post", rid, "pending"), ("update", rid, "approved")]


def test_a_refresh_another_replica_sent_first_is_followed_by_one_read_back(
    service: GateService, jobs: Jobs, cards: ShownCards
) -> None:
    rid = ask(service, tool_name="wire", tool_args={"amount": 1})  # two approvals needed
    pump(jobs)
    held = HeldPump()
    service.pump = held  # this replica's first vote: its refresh waits in a busy pump
    deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    first_vote = held.rows
    service.pump = None  # the second vote, on another replica whose pump is quicker
    deciding.decide(service, rid, approver(service, "bob"), Verdict.approve)
    [other] = outbox.claim_due(service.db, service.clock())
    assert other.kind == "update"
    sending.mark_sent(service.db, other, service.clock(), other.post_ref)
    cards.shown.append(("update", rid, "approved"))  # what the other replica sent
    # now this replica sends its older view, and sees a newer refresh was sent before it
    jobs.hand_over(first_vote)
    pump(jobs)
    assert cards.shown[-1] == ("update", rid, "pending")
    assert rows(service)[-1] == ("update", "pending", 0, False, None)  # owed, due now
    pump(jobs)  # any replica's next run: read back, so the card ends on the newest state
    assert cards.shown[-1] == ("update", rid, "approved")
    assert [r[1] for r in rows(service)] == ["sent"] * 4


def test_a_refresh_handed_over_late_never_puts_an_older_state_back(
    service: GateService, jobs: Jobs, cards: ShownCards
) -> None:
    rid = ask(service, tool_name="wire", tool_args={"amount": 1})  # two approvals needed
    pump(jobs)
    held = HeldPump()
    service.pump = held
    deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    first_vote, held.rows = held.rows, []
    deciding.decide(service, rid, approver(service, "bob"), Verdict.approve)
    second_vote = held.rows
    # the second change's thread hands its rows over first
    jobs.hand_over(second_vote)
    pump(jobs)
    jobs.hand_over(first_vote)
    pump(jobs)
    assert cards.shown == [("post", rid, "pending"), ("update", rid, "approved")]
    assert rows(service)[1:] == [
        ("update", "sent", 1, False, "superseded by a later update"),
        ("update", "sent", 1, False, None),
    ]


def test_rows_handed_to_a_stopped_pump_go_back_to_every_replica(
    service: GateService, jobs: Jobs
) -> None:
    held = HeldPump()
    service.pump = held
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    jobs.running = lambda: False  # the scheduler stopped while the ask committed
    jobs.hand_over(held.rows)
    due = outbox.claim_due(service.db, service.clock())
    assert [(c.request_id, c.kind, c.attempts) for c in due] == [(rid, "post", 1)]


def test_shutdown_gives_back_what_the_pump_had_not_sent(
    service: GateService, jobs: Jobs, cards: ShownCards
) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    assert jobs.release_handed() == 1
    assert rows(service) == [("post", "pending", 0, False, None)]
    # due again for any pump at once: the next run (here or on another replica) claims it
    assert pump(jobs) == 1
    assert cards.shown == [("post", rid, "pending")]
    assert rows(service) == [("post", "sent", 1, False, None)]


def test_a_process_that_died_holding_handed_rows_loses_them_only_for_the_lease(
    service: GateService, jobs: Jobs, clock: Clock
) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    jobs._handed.clear()  # the process died before its pump ran
    assert outbox.claim_due(service.db, service.clock()) == []
    clock.advance(seconds=outbox.LEASE.total_seconds() + 1)
    due = outbox.claim_due(service.db, service.clock())
    assert [(c.request_id, c.attempts) for c in due] == [(rid, 2)]


def test_without_a_running_pump_rows_are_left_due_for_any_replica(
    service: GateService, jobs: Jobs
) -> None:
    jobs.running = lambda: False
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    assert rows(service) == [("post", "pending", 0, False, None)]
    assert [c.request_id for c in outbox.claim_due(service.db, service.clock())] == [rid]


def test_the_lease_on_handed_rows_is_the_pumps(service: GateService, jobs: Jobs) -> None:
    ask(service, tool_name="refund", tool_args={"amount": 1})
    with service.db.read() as session:
        until = session.execute(sa.select(Delivery.claimed_until)).scalar_one()  # type: ignore[call-overload]
    assert until - service.clock() == outbox.LEASE
    # short, since a held row's lease is renewed while it waits and while it is sent
    # (tests/store/test_outbox_reclaim.py): a killed replica's rows are retried within seconds
    assert outbox.LEASE <= timedelta(seconds=10)


def posted_card(service: GateService, clock: Clock, tool_name: str) -> str:
    """A request whose one card (the log channel's) was posted as "card-1"; no pump here:
    rows are claimed from the database, as another replica's would be."""
    service.configured_channels = service.settings.channels.configured()
    rid = ask(service, tool_name=tool_name, tool_args={"amount": 1})
    [post] = outbox.claim_due(service.db, clock())
    sending.mark_sent(service.db, post, clock(), "card-1")
    return rid


@pytest.mark.parametrize(("older_sent_after_start", "owed"), [(True, True), (False, False)])
def test_an_older_refresh_sent_while_a_newer_one_was_on_its_way_owes_a_read_back(
    service: GateService, clock: Clock, older_sent_after_start: bool, owed: bool
) -> None:
    rid = posted_card(service, clock, "wire")
    deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    deciding.decide(service, rid, approver(service, "bob"), Verdict.approve)
    older, newer = outbox.claim_due(service.db, clock())
    started = clock()  # the newer refresh goes out...
    clock.advance(seconds=1 if older_sent_after_start else -1)
    assert not sending.mark_sent(service.db, older, clock(), "card-1")  # a newer one exists,
    # but it was not sent yet: the newer one's own mark decides
    clock.advance(seconds=2)
    assert sending.mark_sent(service.db, newer, clock(), "card-1", started) is owed
    pending = [r for r in rows(service) if r[1] == "pending"]
    assert pending == ([("update", "pending", 0, False, None)] if owed else [])


def test_two_replicas_marking_one_cards_updates_at_once_still_owe_the_read_back(
    service: GateService, jobs: Jobs, clock: Clock
) -> None:
    # The newer update reached the platform first and the older one landed after it, from
    # two replicas. Each mark asks whether another update of the card was sent that may
    # have landed later; run at the same instant, neither check would see the other's.
    if service.db.sqlite:
        pytest.skip("SQLite has one writer at a time: two marks never overlap there")
    rid = ask(service, tool_name="wire", tool_args={"amount": 1})  # two approvals needed
    pump(jobs)
    held = HeldPump()
    service.pump = held
    deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    [(older, _)], held.rows = held.rows, []
    deciding.decide(service, rid, approver(service, "bob"), Verdict.approve)
    [(newer, _)] = held.rows
    start = clock.now
    admin = sa.create_engine(service.db.engine.url)
    marked: dict[str, bool] = {}

    def mark(name: str, claim: outbox.Claimed, sent: float, started: float) -> None:
        marked[name] = sending.mark_sent(
            service.db,
            claim,
            start + timedelta(seconds=sent),
            claim.post_ref,
            start + timedelta(seconds=started),
        )

    def waiting_for_locks() -> int:
        with admin.connect() as conn:
            query = "SELECT count(*) FROM pg_locks WHERE NOT granted"
            return int(conn.execute(sa.text(query)).scalar_one())

    older_mark = threading.Thread(target=mark, args=("older", older, 2.1, 1.2))
    newer_mark = threading.Thread(target=mark, args=("newer", newer, 2.2, 1.0))
    try:
        with admin.connect() as holder:
            # the older row's mark begins, then waits for its row: its snapshot is taken
            holder.execute(
                sa.text("SELECT id FROM delivery WHERE id = :id FOR UPDATE"), {"id": older.id}
            )
            older_mark.start()
            wait_until(lambda: waiting_for_locks() == 1)
            newer_mark.start()  # and the newer one's mark comes meanwhile
            wait_until(lambda: not newer_mark.is_alive() or waiting_for_locks() == 2)
            holder.rollback()
        older_mark.join(10)
        newer_mark.join(10)
    finally:
        admin.dispose()
    assert marked == {"older": False, "newer": True}  # the second mark saw the first
    assert rows(service)[-1] == ("update", "pending", 0, False, None)  # read back, due now


def test_an_update_whose_cards_post_row_is_gone_is_still_marked_sent(
    service: GateService, clock: Clock
) -> None:
    # PostgreSQL's mark takes its turn on the card's post row; with none to take, the
    # update is marked on its own (nothing can have landed after it on a card not there).
    rid = posted_card(service, clock, "refund")
    deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    [update] = outbox.claim_due(service.db, clock())
    with service.db.write() as session:
        session.execute(sa.delete(Delivery).where(Delivery.kind == "post"))  # type: ignore[arg-type]
    assert sending.mark_sent(service.db, update, clock(), "card-1") is False
    assert rows(service) == [("update", "sent", 1, False, None)]
