"""Waiting stays cheap with thousands of agents parked (issue 28, item 7).

A long-poll is held up to the server's `max_wait_seconds` and ended within the cap's last
fifth, at random; an agent's next long-poll, right after one ended pending, is answered from
what the notifier remembers instead of the database, while a change is never missed (a
delivered one forgets it, the safety net's re-read catches one never delivered); waiters'
reads run in their own threads, so a decision is answered while all of those are busy; and
the hook asks for long slices, shortening them under a proxy that cuts them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from gate.api import waiting
from gate.asking.askflow import PROXY_CUT_SHARE, WAIT_SLICE
from gate.asking.askflow import decide as ask_flow
from gate.asking.binding import call_hash
from gate.asking.exchange import Exchange, Pause, Reply
from gate.asking.toolcall import Call
from gate.base import threads
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.http import TLS
from tests.support.servers import wait_until


def ask(gate: Gate) -> str:
    request_id: str = gate.submit(tool_name="ask_wait", tool_args={"n": 1})["request"]["id"]
    return request_id


def long_poll(gate: Gate, request_id: str, timeout: float, client_timeout: float = 30) -> Any:
    with gate.client(cfg.AGENT) as c:
        r = c.get(
            f"/v1/requests/{request_id}/wait",
            params={"timeout": timeout},
            timeout=client_timeout,
        )
    assert r.status_code == 200, r.text
    return r.json()


def approve(gate: Gate, request_id: str) -> None:
    with gate.client(cfg.ALICE) as c:
        r = c.post(f"/v1/requests/{request_id}/decision", json={"verdict": "approve"})
    assert r.status_code == 200, r.text


# -- slices ---------------------------------------------------------------------------------


def test_a_long_poll_asking_more_than_the_cap_is_answered_pending_at_the_cap(
    make_gate: GateFactory,
) -> None:
    gate = make_gate(max_wait_seconds=1)
    request_id = ask(gate)
    started = time.monotonic()
    answer = long_poll(gate, request_id, timeout=600, client_timeout=20)
    held = time.monotonic() - started
    assert answer["status"] == "pending"
    # Held within the cap's last fifth: not the 600 s asked, nor cut short.
    assert 1 - waiting.SLICE_JITTER - 0.05 <= held < 20


def test_slices_held_to_the_cap_end_within_its_last_fifth() -> None:
    cap = 300.0
    ends = [waiting.slice_seconds(600, cap) for _ in range(1000)]  # as the server draws
    assert all(cap * (1 - waiting.SLICE_JITTER) < end <= cap for end in ends)
    assert len({round(end, 3) for end in ends}) > 100  # spread out, not one instant
    assert waiting.slice_seconds(600, cap, 0.0) == cap
    # Any draw: never past the cap, never past what was asked.
    assert all(waiting.slice_seconds(600, cap) <= cap for _ in range(100))
    assert all(waiting.slice_seconds(299.5, cap) <= 299.5 for _ in range(100))


def test_a_timeout_under_the_cap_s_jitter_is_kept_as_asked() -> None:
    assert waiting.slice_seconds(25, 300) == 25
    assert waiting.slice_seconds(0, 300) == 0
    assert waiting.slice_seconds(-1, 300) == 0


def test_the_default_cap_is_minutes_and_the_hook_asks_for_more() -> None:
    cap = cfg.make_settings("sqlite:///x.db").server.max_wait_seconds
    assert cap >= 120  # a few long-polls per wait, not one every 25 s
    assert WAIT_SLICE > cap  # so the server's jitter, not the agents' clocks, ends slices


@pytest.mark.parametrize("seconds", [0, -1, 3601])
def test_a_cap_of_no_time_or_over_an_hour_is_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="max_wait_seconds"):
        cfg.make_settings("sqlite:///x.db", max_wait_seconds=seconds)


# -- renewing a long-poll reads nothing ---------------------------------------------------


@pytest.fixture
def reads_of(gate: Gate) -> Iterator[list[str]]:
    """Every statement the gate's engine runs with a request id among its parameters (the
    statement's text, once per such id); filtered by the test."""
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        values = parameters.values() if isinstance(parameters, dict) else parameters or ()
        seen.extend(str(v) for v in values if isinstance(v, str))

    engine = gate.state.db.engine
    sa.event.listen(engine, "before_cursor_execute", count)
    yield seen
    sa.event.remove(engine, "before_cursor_execute", count)


def test_a_long_poll_renewed_with_nothing_changed_reads_nothing(
    gate: Gate, reads_of: list[str]
) -> None:
    request_id = ask(gate)
    assert long_poll(gate, request_id, timeout=0)["status"] == "pending"
    read = reads_of.count(request_id)
    assert read >= 1  # the first long-poll read it

    for _ in range(3):  # the agent polls again as soon as a slice ends
        assert long_poll(gate, request_id, timeout=0)["status"] == "pending"
    assert reads_of.count(request_id) == read

    approve(gate, request_id)  # a delivered change forgets what was remembered
    assert long_poll(gate, request_id, timeout=0)["status"] == "approved"


async def test_a_change_never_notified_is_still_found_by_the_safety_net(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(waiting, "RECHECK_SECONDS", 0.3)
    request_id = ask(gate)
    assert long_poll(gate, request_id, timeout=0)["status"] == "pending"  # remembered now
    headers = {"Authorization": f"Bearer {cfg.AGENT}"}
    async with httpx.AsyncClient(
        base_url=gate.url, headers=headers, timeout=30, verify=TLS
    ) as client:
        parked = asyncio.create_task(
            client.get(f"/v1/requests/{request_id}/wait", params={"timeout": 20})
        )
        for _ in range(500):
            if gate.state.notifier.waiting:
                break
            await asyncio.sleep(0.01)
        # Another process's change whose notification was lost: written behind gate's back.
        with gate.state.db.engine.begin() as conn:
            conn.execute(
                sa.text("UPDATE confirmation_request SET status = 'cancelled' WHERE id = :id"),
                {"id": request_id},
            )
        answer = await parked
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    # ...and a renewed long-poll is not answered from memory as still pending.
    assert long_poll(gate, request_id, timeout=0)["status"] == "cancelled"


# -- deciding ahead of waiting --------------------------------------------------------------


def test_a_decision_is_answered_while_every_waiter_thread_is_busy(gate: Gate) -> None:
    waited, decided = ask(gate), ask(gate)
    release, busy = threading.Event(), threading.Semaphore(0)

    def hold() -> None:
        busy.release()
        release.wait(60)

    async def occupy_waiters_threads() -> None:
        await asyncio.gather(
            *(threads.run_for_waiters(hold) for _ in range(threads.WAITER_WORKERS))
        )

    holder = threading.Thread(target=asyncio.run, args=(occupy_waiters_threads(),), daemon=True)
    holder.start()
    answers: list[Any] = []
    poller = threading.Thread(
        target=lambda: answers.append(long_poll(gate, waited, timeout=0)), daemon=True
    )
    try:
        for _ in range(threads.WAITER_WORKERS):
            assert busy.acquire(timeout=10)
        poller.start()  # its first read queues behind the held threads
        wait_until(lambda: gate.state.notifier.waiting == 1)
        approve(gate, decided)
        assert gate.submit(tool_name="ask_wait", tool_args={"n": 2})["decision"] == "ask"
        assert poller.is_alive() and not answers  # the waiter's read really was held up
    finally:
        release.set()
    poller.join(30)
    holder.join(30)
    assert answers and answers[0]["status"] == "pending"


# -- the hook's slices ------------------------------------------------------------------------


def test_the_hook_asks_long_slices_and_fits_them_under_a_proxy_that_cuts_them() -> None:
    key = "k"
    pending = {"id": "r1", "status": "pending", "reason": None}
    pending["args_hash"] = call_hash("Bash", {}, key)
    approved = {**pending, "status": "approved", "reason": "Approved by bob"}
    now = [0.0]
    flow = ask_flow(
        Call("Bash", idempotency_key=key), url="http://gate.test", limit=540, clock=lambda: now[0]
    )
    asked: list[float] = []
    # The ask, a slice a proxy cuts after 60 s (504), then the answer.
    replies = [
        (0.0, Reply(200, {"decision": "ask", "rule": "r", "reason": "x", "request": pending})),
        (60.0, Reply(504, problem="gateway timeout")),
        (30.0, Reply(200, approved)),
    ]
    step = next(flow)
    with pytest.raises(StopIteration) as done:
        while True:
            if isinstance(step, Pause):
                now[0] += step.seconds
                step = flow.send(None)
                continue
            assert isinstance(step, Exchange)
            if "/wait?" in step.path:
                asked.append(float(step.path.rsplit("=", 1)[1]))
            lasted, reply = replies.pop(0)
            now[0] += lasted
            step = flow.send(reply)
    assert done.value.value.kind == "approved"
    assert asked[0] == pytest.approx(
        540, abs=0.01
    )  # the whole wait in one slice: the server ends it
    assert asked[1] == pytest.approx(60 * PROXY_CUT_SHARE)  # under the proxy's cut from now on
