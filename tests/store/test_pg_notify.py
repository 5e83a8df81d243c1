"""Two replicas on one PostgreSQL: a decision on A wakes a waiter on B via LISTEN/NOTIFY,
and waiters still get their verdicts when the LISTEN connection is cut."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
import sqlalchemy as sa

from gate.base.notify import Event
from gate.store.db import normalise_url
from gate.store.notify_pg import APPLICATION_NAME, CHANNEL, PostgresNotifier, libpq_url
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.http import TLS
from tests.support.servers import wait_until

pytestmark = pytest.mark.postgres


def _notifier(gate: Gate) -> PostgresNotifier:
    notifier = gate.state.notifier
    assert isinstance(notifier, PostgresNotifier)
    return notifier


def _collect_events(gate: Gate) -> list[Event]:
    """Record every event the replica's notifier delivers locally, from now on."""
    notifier = _notifier(gate)
    seen: list[Event] = []
    before = len(notifier._streams)

    async def consume() -> None:
        async for event in notifier.stream():
            seen.append(event)

    # The notifier lives on the server thread's loop; subscribe there.
    assert notifier._loop is not None
    asyncio.run_coroutine_threadsafe(consume(), notifier._loop)
    wait_until(lambda: len(notifier._streams) > before)
    return seen


@pytest.fixture
def replicas(postgres_url: str, make_gate: GateFactory) -> tuple[Gate, Gate]:
    """Two gate apps on one PostgreSQL database, both listening."""
    a = make_gate(database_url=postgres_url)
    b = make_gate(database_url=postgres_url)
    for gate in (a, b):
        wait_until(lambda g=gate: _notifier(g).backend_pid)
    return a, b


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=8) as executor:
        yield executor


def _wait(gate: Gate, request_id: str) -> dict[str, Any]:
    """Long-poll like a hook: loop until the request is final."""
    headers = {"Authorization": f"Bearer {cfg.AGENT}"}
    with httpx.Client(base_url=gate.url, headers=headers, timeout=90, verify=TLS) as c:
        while True:
            r = c.get(f"/v1/requests/{request_id}/wait", params={"timeout": 60})
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            if body["status"] != "pending":
                return body


def _start_waiters(
    pool: ThreadPoolExecutor, gate: Gate, ids: list[str]
) -> list[Future[dict[str, Any]]]:
    notifier = gate.state.notifier
    before = notifier.waiting
    futures = [pool.submit(_wait, gate, rid) for rid in ids]

    def registered() -> bool:
        for f in futures:
            if f.done():
                f.result()  # surface a waiter that failed instead of timing out here
        return notifier.waiting >= before + len(ids)

    wait_until(registered)
    return futures


def _listeners(admin: sa.Engine) -> dict[int, str]:
    with admin.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT pid, query FROM pg_stat_activity "
                "WHERE application_name = :app AND datname = current_database()"
            ),
            {"app": APPLICATION_NAME},
        ).all()
    return {int(pid): str(query) for pid, query in rows}


def test_decision_on_one_replica_wakes_a_waiter_on_the_other(
    replicas: tuple[Gate, Gate], pool: ThreadPoolExecutor
) -> None:
    a, b = replicas
    seen_on_b = _collect_events(b)
    req = a.submit(tool_name="ask_transfer", tool_args={"n": 1})["request"]
    [waiter] = _start_waiters(pool, b, [req["id"]])

    r = a.decide(req["id"], cfg.ALICE, "approve", "fine")
    assert r.status_code == 200, r.text

    verdict = waiter.result(timeout=60)
    assert verdict["status"] == "approved"
    assert verdict["decided_by"] == "alice"
    # B did not decide: the only way it learns of A's commit is its LISTEN connection.
    wait_until(lambda: Event("final", req["id"]) in seen_on_b)
    assert Event("created", req["id"]) in seen_on_b


def test_waiters_get_verdicts_when_the_listen_connection_is_terminated(
    replicas: tuple[Gate, Gate], pool: ThreadPoolExecutor, postgres_url: str
) -> None:
    a, b = replicas
    admin = sa.create_engine(normalise_url(postgres_url))
    try:
        listener = _notifier(b)
        old_pid = listener.backend_pid
        assert old_pid is not None
        # The listener is visible to operators by name, idle in its LISTEN.
        listeners = _listeners(admin)
        assert listeners[old_pid].startswith("LISTEN")
        assert len(listeners) == 2  # one per replica

        ids = [a.submit(tool_name="ask_cut", tool_args={"n": n})["request"]["id"] for n in range(4)]
        waiters = _start_waiters(pool, b, ids)

        with admin.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": old_pid}).scalar()
        # Decided while B's listener is (most likely) down: its notification is never heard
        # by B, so B's waiter relies on the wake-up after reconnect.
        assert a.decide(ids[0], cfg.ALICE, "approve").status_code == 200
        assert a.decide(ids[1], cfg.BOB, "reject", "no").status_code == 200

        new_pid = wait_until(lambda: listener.backend_pid not in (None, old_pid) and listener)
        assert new_pid.connects >= 2
        assert old_pid not in _listeners(admin)

        seen_on_b = _collect_events(b)
        assert a.decide(ids[2], cfg.CAROL, "approve").status_code == 200
        # After the reconnect, notifications flow again.
        wait_until(lambda: Event("final", ids[2]) in seen_on_b)
        with a.client(cfg.AGENT) as c:
            assert c.post(f"/v1/requests/{ids[3]}/cancel", json={}).status_code == 200

        got = [w.result(timeout=60) for w in waiters]
        assert [g["status"] for g in got] == ["approved", "rejected", "approved", "cancelled"]
        with a.client(cfg.ADMIN) as c:
            stored = [c.get(f"/v1/requests/{rid}").json()["status"] for rid in ids]
        assert stored == [g["status"] for g in got]
    finally:
        admin.dispose()


def test_every_listener_cut_at_once(replicas: tuple[Gate, Gate], postgres_url: str) -> None:
    a, b = replicas
    admin = sa.create_engine(normalise_url(postgres_url))
    try:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :app AND datname = current_database()"
                ),
                {"app": APPLICATION_NAME},
            )
        for gate in (a, b):
            wait_until(lambda g=gate: _notifier(g).connects >= 2 and _notifier(g).backend_pid)
        # The replicas still serve everything else while and after the listener is cut.
        req = b.submit(tool_name="ask_after", tool_args={})["request"]
        with httpx.Client(base_url=a.url, timeout=30, verify=TLS) as c:
            assert c.get("/readyz").status_code == 200
        seen_on_a = _collect_events(a)
        assert b.decide(req["id"], cfg.ALICE, "approve").status_code == 200
        wait_until(lambda: Event("final", req["id"]) in seen_on_a)
    finally:
        admin.dispose()


async def test_a_replica_drops_its_own_changes_heard_again_but_not_anothers(
    postgres_url: str,
) -> None:
    # A change is published locally at its commit; its NOTIFY comes back over LISTEN too.
    # With a waiter parked, hearing it again would start a second read of the request.
    from gate.store.db import Database, upgrade

    upgrade(postgres_url)
    db = Database(postgres_url)
    notifier = PostgresNotifier(db.url, db.engine)
    await notifier.start()
    reads: list[str] = []

    async def read(request_id: str) -> str:
        reads.append(request_id)
        return request_id

    try:
        await asyncio.wait_for(notifier.listening.wait(), 20)
        with notifier.watch("mine", refresh=lambda: read("mine")) as mine:
            with notifier.watch("theirs", refresh=lambda: read("theirs")) as theirs:

                def change() -> None:  # as `GateService.changing` does, in a worker thread
                    with db.write() as session:
                        notifier.stage(session, Event("changed", "mine"))
                    notifier.publish(Event("changed", "mine"))

                await asyncio.to_thread(change)
                assert await asyncio.wait_for(_woken(mine), 20) == "mine"
                # Another replica's change, from a connection outside this replica's pool.
                # Notifications arrive in commit order: once it is heard, ours was too.
                other = await psycopg.AsyncConnection.connect(libpq_url(db.url), autocommit=True)
                async with other:
                    await other.execute("SELECT pg_notify(%s, 'changed:theirs')", (CHANNEL,))
                assert await asyncio.wait_for(_woken(theirs), 20) == "theirs"
        assert reads == ["mine", "theirs"]  # "mine" once: at its commit, not again
    finally:
        await notifier.stop()
        db.dispose()


async def _woken(watch: Any) -> Any:
    """Wait for `watch`'s next wake-up and return the value read for it."""
    while True:
        parked = watch.park(30)
        if parked is not None:
            await parked
        watch.unpark()
        value = watch.take()
        if value is not None:
            return value
