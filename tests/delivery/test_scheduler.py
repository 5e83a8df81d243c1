"""The scheduler's kick: a job kicked while it runs runs once more right after, never skipped."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from gate.delivery.scheduler import Scheduler

#: far longer than the test: any second run must come from a kick, not from a tick
INTERVAL = 3600.0


async def _idle() -> None:
    return None


async def test_a_kick_while_the_pump_runs_runs_it_again_at_once() -> None:
    started: list[float] = []
    first_running = asyncio.Event()
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def pump() -> None:
        started.append(loop.time())
        first_running.set()
        if len(started) == 1:
            await release.wait()

    scheduler = Scheduler(sweep=_idle, pump=pump, sweep_interval=INTERVAL, pump_interval=INTERVAL)
    scheduler.start()
    try:
        scheduler.kick()
        await asyncio.wait_for(first_running.wait(), 5)
        # Kicked three times while running (once from another thread, as a commit in a
        # worker thread does): owed exactly one more run, not three and not none.
        scheduler.kick()
        scheduler.kick()
        kicker = threading.Thread(target=scheduler.kick)
        kicker.start()
        kicker.join()
        release.set()
        for _ in range(200):
            if len(started) >= 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # room for a wrong third run to show
        assert len(started) == 2
        assert started[1] - started[0] < 2.0
    finally:
        scheduler.shutdown()
        await scheduler.drain(5)


async def test_a_kick_while_idle_runs_the_job_once() -> None:
    runs: list[int] = []

    async def pump() -> None:
        runs.append(1)

    scheduler = Scheduler(sweep=_idle, pump=pump, sweep_interval=INTERVAL, pump_interval=INTERVAL)
    scheduler.start()
    try:
        scheduler.kick()
        for _ in range(200):
            if runs:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert runs == [1]
    finally:
        scheduler.shutdown()
        await scheduler.drain(5)


async def test_kicks_from_many_threads_at_once_start_one_run_and_a_tick_never_overlaps() -> None:
    running = 0
    overlapped = False
    runs: list[int] = []

    async def pump() -> None:
        nonlocal running, overlapped
        running += 1
        overlapped = overlapped or running > 1
        runs.append(1)
        await asyncio.sleep(0.05)
        running -= 1

    # a tick every 20 ms lands while kicked runs are on: they must not run side by side
    scheduler = Scheduler(sweep=_idle, pump=pump, sweep_interval=INTERVAL, pump_interval=0.02)
    scheduler.start()
    try:
        kickers = [threading.Thread(target=scheduler.kick) for _ in range(16)]
        for kicker in kickers:
            kicker.start()
        for kicker in kickers:
            kicker.join()
        await asyncio.sleep(0.5)
        assert runs and not overlapped
    finally:
        scheduler.shutdown()
        await scheduler.drain(5)


async def test_a_kick_after_shutdown_runs_nothing() -> None:
    runs: list[int] = []

    async def pump() -> None:
        runs.append(1)

    scheduler = Scheduler(sweep=_idle, pump=pump, sweep_interval=INTERVAL, pump_interval=INTERVAL)
    scheduler.start()
    scheduler.shutdown()
    scheduler.kick()
    await asyncio.sleep(0.1)
    assert runs == []


async def test_a_stop_while_a_tick_runs_lets_it_finish_and_logs_no_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """APScheduler's stop cancels the wrapper of a job its tick started; the job itself is
    shielded and finishes (drain waits for it), and nothing is logged as a failed job (every
    stop during a tick used to print "Job ... raised an exception" with a CancelledError
    traceback, on a server whose jobs had all finished)."""
    running, release = asyncio.Event(), asyncio.Event()
    finished: list[int] = []

    async def pump() -> None:
        running.set()
        await release.wait()
        finished.append(1)

    # a tick every 50 ms starts the job through APScheduler's executor (a kick would not)
    scheduler = Scheduler(sweep=_idle, pump=pump, sweep_interval=INTERVAL, pump_interval=0.05)
    with caplog.at_level(logging.WARNING):
        scheduler.start()
        await asyncio.wait_for(running.wait(), 5)
        scheduler.shutdown()
        await asyncio.sleep(0.01)  # the executor's cancellation reaches the wrapper
        release.set()
        await scheduler.drain(5)
    assert finished == [1]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
