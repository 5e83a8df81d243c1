"""An expiry against an extension committed between the sweep's read and its write.

The sweep finds what is due with one read, then expires each request in a transaction of its
own, reading the row without its lock. An approver's extension that commits after that read
must win: the expiry's compare-and-set carries the deadline it read (`rows.CAS["deadline"]`),
so on PostgreSQL, where the UPDATE waits for the extension's lock and then re-checks its
WHERE on the new row, it changes nothing. SQLite's writer lock serialises the two whole, so
there the expiry reads the extension; the test holds on both.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from gate.base.statuses import RequestStatus
from gate.decisions import audit, machine, outcomes
from gate.decisions.service import GateService
from gate.store import rows
from tests.core.conftest import Clock, ask


def test_an_extension_committed_while_the_sweep_expired_the_request_wins(
    service: GateService, clock: Clock
) -> None:
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    found = service.view(rid)
    assert found is not None
    due = found.expires_at
    clock.now = due  # the sweep runs at the deadline
    extending, swept = threading.Event(), threading.Event()

    def extend() -> None:
        # an approver's extension, holding the row's lock (written, not yet committed) while
        # the sweep reads the old deadline and its compare-and-set waits for the lock
        with service.changing() as change:
            rows.read(change.session, rid, lock=True)
            until = due + timedelta(hours=1)
            moved = machine.extend(
                change.session,
                request_id=rid,
                until=until,
                actor="alice",
                via="web",
                now=due - timedelta(seconds=1),
            )
            assert isinstance(moved, outcomes.Extended)
            extending.set()
            swept.wait(0.5)  # the sweep does not end while this holds the lock

    holder = threading.Thread(target=extend)
    holder.start()
    assert extending.wait(10)
    expired = service.expire_due(due)
    swept.set()
    holder.join(10)
    assert expired == 0
    view = service.view(rid, full=True)
    assert view is not None and view.status == RequestStatus.pending
    assert view.expires_at == due + timedelta(hours=1)
    assert [a.kind for a in view.audit] == ["created", "extended"]
    assert audit.verify(service.db) == []


def test_an_expiry_with_its_deadline_unmoved_still_expires(
    service: GateService, clock: Clock
) -> None:
    # the guard keeps the common case: nothing moved the deadline, the sweep ends it
    rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    clock.advance(minutes=10)
    assert service.expire_due(clock.now) == 1
    view = service.view(rid)
    assert view is not None and view.status == RequestStatus.expired
