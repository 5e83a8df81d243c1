"""A change is read once and handed to every waiter of the request with its wake-up.

`Notifier.watch(request_id, refresh=...)`: the delivery of an event starts one read (after the
commit that sent it) and wakes each waiter with its result, so 1,000 waiters wake once each,
answer in hand, instead of waking, queueing on a shared read and waking again.
"""

from __future__ import annotations

import asyncio

from gate.base.notify import Event, Notifier


async def _until(condition: object, tries: int = 200) -> None:
    for _ in range(tries):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_one_read_is_handed_to_every_waiter() -> None:
    notifier = Notifier()
    await notifier.start()
    reads = 0

    async def refresh() -> dict[str, int]:
        nonlocal reads
        reads += 1
        return {"read": reads}

    async def waiter() -> object:
        with notifier.watch("r1", refresh=refresh) as watch:
            parked = watch.park(30)
            assert parked is not None
            await parked
            assert watch.unpark()  # woken by the change, not by the timer
            return watch.take()

    waiters = [asyncio.create_task(waiter()) for _ in range(50)]
    await _until(lambda: notifier.waiting == 50)
    notifier.publish(Event("final", "r1"))
    values = await asyncio.gather(*waiters)
    assert reads == 1
    assert all(v is values[0] for v in values) and values[0] == {"read": 1}
    assert notifier.waiting == 0


async def test_a_read_finishing_late_does_not_replace_a_newer_one() -> None:
    notifier = Notifier()
    await notifier.start()
    gates = [asyncio.Event(), asyncio.Event()]
    started = 0

    async def refresh() -> str:
        nonlocal started
        number = started
        started += 1
        await gates[number].wait()
        return f"read after change {number + 1}"

    with notifier.watch("r1", refresh=refresh) as watch:
        notifier.publish(Event("changed", "r1"))  # a vote: read 1 begins
        notifier.publish(Event("final", "r1"))  # the decision: read 2 begins
        await _until(lambda: started == 2)
        gates[1].set()  # read 2 finishes first
        await _until(lambda: watch.unpark())
        assert watch.take() == "read after change 2"
        gates[0].set()  # read 1 finishes late: it wakes, but hands nothing older over
        await _until(lambda: watch.unpark())
        assert watch.take() is None


async def test_a_failed_read_wakes_the_waiters_to_read_for_themselves() -> None:
    notifier = Notifier()
    await notifier.start()

    async def refresh() -> str:
        raise ConnectionError("database gone")

    with notifier.watch("r1", refresh=refresh) as watch:
        parked = watch.park(30)
        assert parked is not None
        notifier.publish(Event("final", "r1"))
        await parked
        assert watch.unpark()
        assert watch.take() is None


async def test_without_refresh_waiters_are_only_woken() -> None:
    notifier = Notifier()
    await notifier.start()
    with notifier.watch("r1") as watch:
        notifier.publish(Event("final", "r1"))
        assert await watch.wait(5)
        assert watch.take() is None


async def test_a_missed_notification_gap_wakes_waiters_to_read() -> None:
    notifier = Notifier()
    await notifier.start()

    async def refresh() -> str:
        return "never read: wake_all does not say what changed"

    with notifier.watch("r1", refresh=refresh) as watch:
        notifier.wake_all()
        assert await watch.wait(5)
        assert watch.take() is None
