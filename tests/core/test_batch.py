"""A change's trailing writes sent together (`gate.store.batch`): the same rows as one by one.

On PostgreSQL `GateService.changing` holds the writes nobody reads before the commit and
sends them as one statement; on SQLite each runs at once. Every test runs on both and checks
what the database holds afterwards, so the two ways cannot drift apart; the statement counts
show which way ran.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial

import psycopg
import pytest
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from gate.base.statuses import GrantStatus, Verdict, new_id
from gate.decisions import audit, deciding, grants, machine, outcomes
from gate.decisions.service import GateService
from gate.store import batch, outbox, rows
from gate.store.notify_pg import CHANNEL, PostgresNotifier, libpq_url
from gate.store.records import RequestRow
from tests.core.conftest import Clock, approver, ask, granted_refund
from tests.support.sql_counter import counting, per_database


def _request(service: GateService, clock: Clock) -> RequestRow:
    now = clock.now
    return rows.new_request(
        id=new_id(),
        tool_name="refund",
        agent_id="billing-agent",
        submitted_by="billing-agent",
        created_at=now,
        expires_at=now,
        args_hash="h",
    )


def _created(session: Session, req: RequestRow, clock: Clock) -> None:
    """Write `req` and its first audit event, as an ask does."""
    rows.insert_request(session, req)
    audit.record(
        session, request_id=req.id, kind="created", actor="a", via="api", now=clock.now, first=True
    )


def _deliveries(service: GateService, request_id: str) -> list[tuple[str, str]]:
    """(kind, target) of a request's delivery rows, oldest first."""
    with service.db.read() as session:
        found = session.connection().execute(
            rows.DELIVERY.select()
            .where(rows.DELIVERY.c.request_id == request_id)
            .order_by(rows.DELIVERY.c.id)
        )
        return [(row.kind, row.target) for row in found]


def test_a_write_that_reads_a_table_sees_the_writes_held_for_it(
    service: GateService, clock: Clock
) -> None:
    # An escalation's shape: new card posts, then a refresh of every post of the request,
    # copied by INSERT ... SELECT. All parts of one statement share a snapshot, so the copy
    # must not ride with the posts it copies: they are sent first.
    req = _request(service, clock)
    with counting(service.db.engine) as tally, service.changing() as change:
        rows.insert_request(change.session, req)
        outbox.enqueue_posts(change.session, req.id, [("log", "a"), ("log", "b")], clock.now)
        outbox.enqueue_updates(change.session, req.id, clock.now)
    assert _deliveries(service, req.id) == [
        ("post", "a"),
        ("post", "b"),
        ("update", "a"),
        ("update", "b"),
    ]
    # PostgreSQL: the request with its posts, then the copy
    assert tally.count == per_database(service.db.engine, sqlite=3, postgres=2), str(tally)


def test_the_audit_chain_head_is_read_after_the_events_the_batch_holds(
    service: GateService, clock: Clock
) -> None:
    req = _request(service, clock)
    with service.changing() as change:
        _created(change.session, req, clock)
        # no head passed: it is read, and the event just held must be the one it finds
        audit.record(
            change.session,
            request_id=req.id,
            kind="reminded",
            actor=None,
            via=None,
            now=clock.now,
        )
    events = audit.trail(service.db, req.id)
    assert [e.kind for e in events] == ["created", "reminded"]
    assert events[1].prev_hash == events[0].chain_hash
    assert audit.verify(service.db) == []


def test_a_change_whose_writes_fail_keeps_none_of_them(service: GateService, clock: Clock) -> None:
    taken = ask(service, tool_name="refund", tool_args={"amount": 1})
    fresh, clash = _request(service, clock), _request(service, clock)
    clash.id = taken  # the primary key of a request that exists
    with pytest.raises(IntegrityError), service.changing() as change:
        _created(change.session, fresh, clock)
        outbox.enqueue_posts(change.session, fresh.id, [("log", "log")], clock.now)
        rows.insert_request(change.session, clash)
    assert service.view(fresh.id) is None
    assert audit.trail(service.db, fresh.id) == []
    assert _deliveries(service, fresh.id) == []


class _Listener:
    """A LISTEN connection of the test's own (psycopg, autocommit)."""

    def __init__(self, service: GateService) -> None:
        self.conn = psycopg.connect(libpq_url(service.db.url), autocommit=True)
        self.conn.execute(f"LISTEN {CHANNEL}")

    def next(self, timeout: float = 10) -> str:
        """The next notification's payload."""
        deadline = time.monotonic() + timeout
        while True:
            for notify in self.conn.notifies(timeout=0, stop_after=1):
                return notify.payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no notification came")
            select.select([self.conn.fileno()], [], [], left)

    def close(self) -> None:
        self.conn.close()


def test_the_notify_rides_in_the_changes_statement_and_only_a_commit_sends_it(
    service: GateService, clock: Clock
) -> None:
    if service.db.sqlite:
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    service.notifier = PostgresNotifier(service.db.url)  # stages NOTIFY; not listening itself
    listener = _Listener(service)
    try:
        with counting(service.db.engine) as tally:
            rid = ask(service, tool_name="refund", tool_args={"amount": 1})
        # the grant lookup, then the request, its event, its NOTIFY: one statement
        assert (tally.count, tally.transactions) == (2, 1), str(tally)
        assert listener.next() == f"created:{rid}"

        # A change that fails sends nothing: its NOTIFY was part of the failed statement.
        # Notifications arrive in commit order, so the next one is the next change's.
        with pytest.raises(IntegrityError), service.changing() as change:
            clash = _request(service, clock)
            clash.id = rid
            rows.insert_request(change.session, clash)
            change.touched(rid)

        with counting(service.db.engine) as tally:
            deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
        # the lock (with the chain's head read after it); then the transition, the vote, its
        # event, the card refresh and the NOTIFY as one statement
        assert (tally.count, tally.transactions) == (2, 1), str(tally)
        assert listener.next() == f"final:{rid}"
    finally:
        listener.close()


def _event_under_lock(
    service: GateService,
    clock: Clock,
    rid: str,
    *,
    row_changed: bool,
    held: Callable[[], None] | None = None,
) -> None:
    """Lock the request's row and write an event for it in one transaction: an extension,
    which changes the row, or a reminder, which leaves it as it was. `held` runs before the
    commit, with the lock still held."""
    with service.changing() as change:
        rows.read(change.session, rid, lock=True)
        if row_changed:
            until = clock.now + timedelta(hours=1)
            extended = machine.extend(
                change.session, request_id=rid, until=until, actor="bob", via="web", now=clock.now
            )
            assert isinstance(extended, outcomes.Extended)
        else:
            audit.record(
                change.session, request_id=rid, kind="reminded", actor=None, via=None, now=clock.now
            )
        if held is not None:
            held()


@pytest.mark.parametrize("row_changed", [False, True], ids=["row-untouched", "row-changed"])
def test_an_event_written_while_a_decision_waited_for_the_lock_is_its_events_prev(
    service: GateService, clock: Clock, row_changed: bool
) -> None:
    # A pending request one approval decides. SQLite: its chain's head comes back with the
    # compare-and-set. PostgreSQL: with the lock, read by a function that takes a snapshot
    # of its own, since the locking statement's own snapshot predates its wait. Either must
    # see an event committed while the decision waited, whether or not the lock's holder
    # changed the row (an event alone leaves the row as the decision's snapshot had it).
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    locked, decided = threading.Event(), threading.Event()
    kind = "extended" if row_changed else "reminded"

    def remind() -> None:
        # the decision is waiting for this lock (SQLite: for the one writer) meanwhile
        _event_under_lock(service, clock, rid, row_changed=row_changed, held=waited)

    def waited() -> None:
        locked.set()
        assert not decided.wait(0.5)

    holder = threading.Thread(target=remind)
    holder.start()
    assert locked.wait(10)
    result = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    decided.set()
    holder.join(10)
    assert result.changed
    events = audit.trail(service.db, rid)
    assert [e.kind for e in events] == ["created", kind, "approved"]
    assert events[2].prev_hash == events[1].chain_hash
    assert audit.verify(service.db) == []


def test_a_grant_ended_while_an_outcome_is_recorded_extends_the_chain_after_it(
    service: GateService, clock: Clock
) -> None:
    # Both append to the approving request's chain: ending the grant waits for the request's
    # lock, so its event follows the outcome's instead of forking the chain beside it.
    request_id = granted_refund(service)
    with service.db.read() as session:
        (grant,) = [g.id for g in grants.list_grants(session, active_only=True, now=clock.now)]
    locked, ended = threading.Event(), threading.Event()

    def report() -> None:
        with service.changing() as change:
            assert machine.record_outcome(
                change.session,
                request_id=request_id,
                outcome="ran",
                summary=None,
                actor="billing-agent",
                now=clock.now,
            )
            locked.set()
            assert not ended.wait(0.5)  # PostgreSQL: ending the grant waits for this lock

    holder = threading.Thread(target=report)
    holder.start()
    assert locked.wait(10)
    with service.db.write() as session:
        assert machine.end_grant(
            session, grant_id=grant, to=GrantStatus.revoked, actor="alice", now=clock.now
        )
    ended.set()
    holder.join(10)
    kinds = [e.kind for e in audit.trail(service.db, request_id)]
    assert kinds[-2:] == ["ran", "grant_revoked"]
    assert audit.verify(service.db) == []


def test_a_decision_that_makes_a_grant_keeps_its_chain_in_order(service: GateService) -> None:
    # Its `approved` and `grant_created` events both go to the audit table: as parts of one
    # statement PostgreSQL could give them their ids in the other order, and the chain is
    # read in id order. A second write to a table sends the first.
    request_id = granted_refund(service)
    events = audit.trail(service.db, request_id)
    assert [e.kind for e in events] == ["created", "approved", "grant_created"]
    assert [e.prev_hash for e in events[1:]] == [e.chain_hash for e in events[:-1]]
    assert audit.verify(service.db) == []


def _decision_raced_by(
    service: GateService,
    clock: Clock,
    rid: str,
    between: Callable[[], object],
    *,
    handed: bool,
    by: str = "alice",
    verdict: Verdict = Verdict.approve,
) -> None:
    """`by`'s decision on `rid`, its row read without the lock (PostgreSQL), with `between`
    run to its end in another thread before it writes: its one statement must fail whole.
    `handed`: its card rows are claimed for the pump (a part of the statement returns rows)."""
    with pytest.raises(batch.Unmet), service.changing() as change:
        if handed:
            outbox.hand_to_pump(change.session, clock.now + outbox.LEASE)
        loaded = machine.lock(change.session, rid, optimistic=True)
        assert loaded is not None
        req, votes = loaded
        assert req.optimistic and votes == []
        other = threading.Thread(target=between)
        other.start()
        other.join(10)
        outcome = machine.record_vote(
            change.session,
            req,
            votes,
            approver=by,
            verdict=verdict,
            comment=None,
            via="api",
            now=clock.now,
        )
        assert isinstance(outcome, outcomes.Changed)  # as far as it knew


@pytest.mark.parametrize("handed", [False, True], ids=["owed", "handed-to-the-pump"])
@pytest.mark.parametrize("row_changed", [False, True], ids=["row-untouched", "row-changed"])
def test_a_decision_on_a_row_changed_after_its_unlocked_read_keeps_nothing(
    service: GateService, clock: Clock, row_changed: bool, handed: bool
) -> None:
    # PostgreSQL reads a decision's row without its lock (machine.lock, optimistic); an
    # event committed between that read and the write (with the row changed or only
    # locked) makes the write's one statement fail whole, whether or not a part of it
    # returns rows (card refreshes claimed for the pump), and deciding again succeeds
    if service.db.sqlite:
        pytest.skip("SQLite reads under its writer's lock (BEGIN IMMEDIATE)")
    service.configured_channels = service.settings.channels.configured()
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    kind = "extended" if row_changed else "reminded"

    def intervene() -> None:
        _event_under_lock(service, clock, rid, row_changed=row_changed)

    _decision_raced_by(service, clock, rid, intervene, handed=handed)
    view = service.view(rid)
    assert view is not None and view.status == "pending" and view.votes == []
    assert [e.kind for e in audit.trail(service.db, rid)] == ["created", kind]
    refreshed = [("update", "log")] if row_changed else []  # the extension's own
    assert _deliveries(service, rid) == [("post", "log"), *refreshed]
    result = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert result.changed
    assert [e.kind for e in audit.trail(service.db, rid)] == ["created", kind, "approved"]
    assert audit.verify(service.db) == []


def test_a_required_part_outside_a_batch_is_refused(service: GateService) -> None:
    with pytest.raises(TypeError, match="needs a batch"), service.db.write() as session:
        batch.write(session, rows.checked_cas_of(("reason",), False), {}, required=True)


@pytest.mark.parametrize("handed", [False, True], ids=["owed", "handed-to-the-pump"])
@pytest.mark.parametrize("same_approver", [True, False], ids=["same-approver", "other-approver"])
def test_a_decision_made_between_anothers_unlocked_read_and_write_wins_alone(
    service: GateService, clock: Clock, same_approver: bool, handed: bool
) -> None:
    # Two clicks (one person's double click, delivered twice, or two approvers) on a request
    # one approval decides. The first commits between the second's unlocked read and its
    # write: the second keeps nothing and, decided again under the lock, is told it is
    # already decided. Its vote must not collide with the first one's (the same approver's
    # second vote would break the one-vote-per-approver key) before the check says why.
    if service.db.sqlite:
        pytest.skip("SQLite reads under its writer's lock (BEGIN IMMEDIATE)")
    service.configured_channels = service.settings.channels.configured()
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    second = "alice" if same_approver else "bob"
    first = partial(deciding.decide, service, rid, approver(service, "alice"), Verdict.approve)
    _decision_raced_by(service, clock, rid, first, handed=handed, by=second, verdict=Verdict.reject)
    again = deciding.decide(service, rid, approver(service, second), Verdict.reject)
    assert isinstance(again.outcome, outcomes.AlreadyFinal)
    view = service.view(rid)
    assert view is not None and view.status == "approved"
    assert [(v.approver, v.verdict) for v in view.votes] == [("alice", "approve")]
    assert [e.kind for e in audit.trail(service.db, rid)] == ["created", "approved"]
    assert audit.verify(service.db) == []


@pytest.mark.parametrize(
    ("ending", "row_changed"),
    # an expiry that finds its deadline extended leaves the request be (tests/core/
    # test_use_cases.py), so it races only with an event that leaves the row as it was
    [("cancel", False), ("cancel", True), ("expire", False)],
    ids=["cancel-row-untouched", "cancel-row-changed", "expire-row-untouched"],
)
def test_an_event_written_while_a_cancel_or_expiry_waited_for_the_row_is_its_events_prev(
    service: GateService, clock: Clock, row_changed: bool, ending: str
) -> None:
    # A cancel or an expiry reads the row without its lock and ends it with a compare-and-set
    # that returns the chain's head: read after the UPDATE holds the row, so an event the
    # lock's holder committed meanwhile (an extension, or a reminder that leaves the row as
    # it was) is the new event's prev, not a sibling of it
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    locked, ended = threading.Event(), threading.Event()
    kind = "extended" if row_changed else "reminded"

    def remind() -> None:
        _event_under_lock(service, clock, rid, row_changed=row_changed, held=waited)

    def waited() -> None:
        locked.set()
        assert not ended.wait(0.5)  # the cancel or expiry waits for this lock meanwhile

    holder = threading.Thread(target=remind)
    holder.start()
    assert locked.wait(10)
    if ending == "cancel":
        outcome = service.withdraw(rid, actor="billing-agent", via="agent", why="done")
    else:
        view = service.view(rid)
        assert view is not None
        with service.changing() as change:  # as the sweep, which found it due
            outcome = machine.expire(change.session, request_id=rid, now=view.expires_at)
    ended.set()
    holder.join(10)
    assert isinstance(outcome, outcomes.Changed)
    events = audit.trail(service.db, rid)
    assert [e.kind for e in events][:2] == ["created", kind]
    assert events[2].prev_hash == events[1].chain_hash
    assert audit.verify(service.db) == []
