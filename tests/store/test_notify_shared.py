"""Waiters of one request share one re-read, but never one begun before their wake-up."""

from __future__ import annotations

import asyncio

import httpx

from gate.base.notify import Event, Notifier
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.http import TLS


async def test_waiters_woken_together_share_one_read() -> None:
    notifier = Notifier()
    await notifier.start()
    reads = 0
    release = asyncio.Event()

    async def read() -> int:
        nonlocal reads
        reads += 1
        await release.wait()
        return reads

    readers = [
        asyncio.create_task(notifier.shared_read("r1", notifier.seq, read)) for _ in range(50)
    ]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*readers) == [1] * 50
    assert reads == 1


async def test_a_read_begun_before_a_wake_up_is_not_shared() -> None:
    notifier = Notifier()
    await notifier.start()
    calls = 0
    release = asyncio.Event()

    async def read() -> int:
        nonlocal calls
        calls += 1
        number = calls
        await release.wait()
        return number

    early = asyncio.create_task(notifier.shared_read("r1", notifier.seq, read))
    while calls < 1:
        await asyncio.sleep(0)
    with notifier.watch("r1") as watch:
        notifier.publish(Event("final", "r1"))  # the decision commits while read 1 runs
        assert await watch.wait(1.0)
        late = asyncio.create_task(notifier.shared_read("r1", notifier.seq, read))
        while calls < 2:
            await asyncio.sleep(0)
        release.set()
        assert await early == 1
        assert await late == 2  # its own read, begun after the wake-up
    assert await notifier.shared_read("r1", notifier.seq, read) == 3  # nothing left behind


async def test_watch_times_out_without_a_change_and_remembers_an_early_one() -> None:
    notifier = Notifier()
    await notifier.start()
    with notifier.watch("r1") as watch:
        assert not await watch.wait(0.01)
        notifier.publish(Event("changed", "r1"))
        assert await watch.wait(5.0)  # set before wait(): returns at once, woken
        assert not await watch.wait(0.01)  # and the flag was consumed


async def test_many_waiters_on_one_request_all_see_the_decision(gate: Gate) -> None:
    request_id = gate.submit(tool_name="ask_fanout", tool_args={})["request"]["id"]
    headers = {"Authorization": f"Bearer {cfg.AGENT}"}
    limits = httpx.Limits(max_connections=300)
    async with httpx.AsyncClient(
        base_url=gate.url, headers=headers, limits=limits, verify=TLS
    ) as client:
        waiters = [
            asyncio.create_task(
                client.get(f"/v1/requests/{request_id}/wait?timeout=30", timeout=60)
            )
            for _ in range(200)
        ]
        while gate.state.notifier.waiting < 200:
            await asyncio.sleep(0.02)
        r = await asyncio.to_thread(gate.decide, request_id, cfg.ALICE)
        assert r.status_code == 200, r.text
        answers = await asyncio.gather(*waiters)
    assert [a.status_code for a in answers] == [200] * 200
    assert {a.json()["status"] for a in answers} == {"approved"}
