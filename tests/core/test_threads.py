"""`gate.base.threads`: work handed to a worker thread, and what that thread owes the event loop.

`soon` from a function running under `run_sync` must run its callbacks on the loop once the
function returns, in order, before the awaiting caller resumes, and even when the function
raised (a committed change's waiters must still wake). From the loop it is `call_soon`, from
any other thread `call_soon_threadsafe`, and a closed loop drops it without an error.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from gate.base import threads


def test_callbacks_owed_by_a_worker_run_after_it_returns_and_before_the_caller() -> None:
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def work() -> str:
            threads.soon(loop, seen.append, "first")
            threads.soon(
                loop, lambda: seen.append(f"on loop: {threading.get_ident() == loop_thread}")
            )
            seen.append("work done")  # the callbacks have not run yet: the loop was not woken
            return "result"

        result = await threads.run_sync(work)
        seen.append(result)

    asyncio.run(main())
    assert seen == ["work done", "first", "on loop: True", "result"]


def test_callbacks_owed_by_a_worker_that_raised_still_run() -> None:
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def work() -> None:
            threads.soon(loop, seen.append, "woken")
            raise ValueError("after the commit")

        with pytest.raises(ValueError, match="after the commit"):
            await threads.run_sync(work)
        await asyncio.sleep(0)

    asyncio.run(main())
    assert seen == ["woken"]


def test_callbacks_run_when_the_caller_was_cancelled() -> None:
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        release = threading.Event()

        def work() -> None:
            release.wait(5)
            threads.soon(loop, seen.append, "woken")

        task = asyncio.ensure_future(threads.run_sync(work))
        await asyncio.sleep(0.05)
        task.cancel()
        release.set()
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)

    asyncio.run(main())
    assert seen == ["woken"]


def test_soon_from_the_loop_and_from_a_foreign_thread() -> None:
    seen: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        threads.soon(loop, seen.append, "from the loop")
        assert seen == []  # call_soon: not inline
        await asyncio.sleep(0)
        other = threading.Thread(target=threads.soon, args=(loop, seen.append, "from a thread"))
        other.start()
        other.join()
        await asyncio.sleep(0.01)

    asyncio.run(main())
    assert seen == ["from the loop", "from a thread"]


def test_soon_on_a_closed_loop_drops_the_callback() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    threads.soon(loop, pytest.fail, "ran on a closed loop")  # no error, nothing runs


def test_a_job_never_waits_behind_a_blocked_one_below_the_cap() -> None:
    # The first job blocks until the second has run: with the second queued behind it
    # (no thread of its own) this would never finish.
    released = threading.Event()

    async def main() -> list[str]:
        first = asyncio.ensure_future(threads.run_sync(lambda: released.wait(10) and "first"))
        await asyncio.sleep(0)  # the first job is in a thread before the second is queued
        second = await threads.run_sync(lambda: released.set() or "second")
        return [second, await first]

    assert asyncio.run(asyncio.wait_for(main(), 5)) == ["second", "first"]


def test_an_owed_callback_that_raises_does_not_keep_the_caller_from_its_result() -> None:
    reported: list[str] = []

    async def main() -> str:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: reported.append(context["message"]))

        def broken() -> None:
            raise RuntimeError("a waiter's bug")

        def work() -> str:
            threads.soon(loop, broken)
            return "committed"

        return await threads.run_sync(work)

    assert asyncio.run(asyncio.wait_for(main(), 5)) == "committed"
    assert len(reported) == 1 and "owed by a worker thread" in reported[0]


def test_stopping_the_workers_finishes_the_jobs_already_queued() -> None:
    pool = threads._Workers(2, "gate-test")
    done: list[int] = []
    gate = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for n in range(5):
            pool.submit((loop, loop.create_future(), lambda n=n: gate.wait(5) and done.append(n)))
        gate.set()
        await asyncio.to_thread(pool.stop)

    asyncio.run(main())
    assert sorted(done) == [0, 1, 2, 3, 4]
