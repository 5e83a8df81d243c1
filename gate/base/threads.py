"""Worker threads for blocking work (database transactions), handed off cheaply.

Every ask, decision and card delivery crosses to a worker thread at least once. anyio's
`to_thread.run_sync` costs ~80 us of CPU per crossing here (a capacity limiter, a cancel
scope and an extra pass of the event loop); `loop.run_in_executor` on a `ThreadPoolExecutor`
~35 us (a concurrent future chained to an asyncio one, two wake-ups of the loop, and the
executor's semaphore, a Python-level condition, taken on every submit); the pool here ~15 us:
a C queue, the caller's own asyncio future, and one wake-up of the loop that delivers the
result. (Those on an Intel VM; on a slower AMD one a crossing of this pool cost 65-70 us and
the executor's 80-95 us, under uvloop: the two wake-ups, not the Python, are most of it.)
The hot paths use `run_sync` below; code elsewhere may keep anyio's.

Long-polls read through a pool of their own (`run_for_waiters`), a few threads wide: 10,000
parked waiters re-reading (a reconnect's `wake_all`, first reads of new waiters) queue there,
never in front of a decision or an ask, and hold at most `WAITER_WORKERS` database
connections, so the pool's others stay free for the transactions that decide.

A caller that is cancelled stops waiting, and the thread finishes its work on its own: a
transaction is never cut in half by a cancellation (as with anyio's shielded threads), and
at exit the process waits for the work already started.

Work a worker thread owes the event loop (waking waiters, kicking the outbox pump) goes
through `soon`: from inside `run_sync` it is handed over when the thread's function returns,
together with the result, instead of waking the loop while the thread still works. A loop
woken early competes with the thread for the GIL for the rest of its transaction, and every
release the database driver makes then costs both threads a futex round trip.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import queue
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")

#: as many as anyio's default limiter lends: calls beyond wait for a free thread
MAX_WORKERS = 40
#: threads for waiters' reads: one read is a few hundred microseconds of CPU on two cores, so
#: a few threads keep the CPU busy while one waits on PostgreSQL's answer; half the default
#: PostgreSQL pool (`db_pool_size` 8), so waiting never holds all of its connections
WAITER_WORKERS = 4

#: (loop, future, work) handed to a worker; None tells a worker to stop
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]] | None
_Owed = list[tuple[Callable[..., Any], tuple[Any, ...]]]


class _Workers:
    """Threads started as work needs them (up to `MAX_WORKERS`), taking jobs from one queue.

    Every job queued either reserves an idle thread or starts a new one, so a job never
    waits behind another while the cap allows a thread for it (a transaction waiting for a
    row lock must not hold up the work that would release it). At the cap, jobs wait for
    the first thread to finish.
    """

    def __init__(self, most: int, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._most = most
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for a job, less the jobs queued for them
        self._stopped = False

    def submit(self, job: _Job) -> None:
        """Queue `job` for an idle thread, or for a new one."""
        thread = None
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._most and not self._stopped:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
        self._jobs.put(job)
        if thread is not None:
            thread.start()

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is None:
                return
            _run(*job)
            with self._lock:
                self._idle += 1

    def stop(self) -> None:
        """Let every thread finish the job it runs and those queued, then end (at exit)."""
        with self._lock:
            self._stopped = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join()


#: the pools by name (`gate-worker`, `gate-waiter`), each started at its first use
_pools: dict[str, _Workers] = {}
_pool_lock = threading.Lock()
#: per worker thread: (loop, callbacks) the function running under `run_sync` owes its loop
_local = threading.local()
GENERAL, WAITERS = "gate-worker", "gate-waiter"
_SIZES = {GENERAL: MAX_WORKERS, WAITERS: WAITER_WORKERS}


def _workers(name: str) -> _Workers:
    pool = _pools.get(name)
    if pool is None:
        with _pool_lock:
            pool = _pools.get(name)
            if pool is None:
                pool = _pools[name] = _Workers(_SIZES[name], name)
                atexit.register(pool.stop)
    return pool


async def run_sync(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` in a worker thread, with the caller's context variables (the
    request id the logs carry)."""
    return await _run_in(GENERAL, function, args)


async def run_for_waiters(function: Callable[..., T], *args: Any) -> T:
    """`run_sync`, in the waiters' own few threads: long-polls' reads queue behind each
    other there, never in front of the general pool's asks and decisions."""
    return await _run_in(WAITERS, function, args)


async def _run_in(pool: str, function: Callable[..., T], args: tuple[Any, ...]) -> T:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()
    _workers(pool).submit((loop, future, partial(context.run, function, *args)))
    return await future


def _run(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], work: Callable[[], Any]
) -> None:
    """Run `work` in this worker, then hand the loop its result and what it owes (see
    `soon`) in one wake-up, even when it raised: the callbacks of a committed change must
    run whatever happened after the commit, and whether or not the caller still waits."""
    owed: _Owed = []
    _local.owing = (loop, owed)
    try:
        result, error = work(), None
    except BaseException as exc:  # the caller's to see, as from any awaited call
        result, error = None, exc
    finally:
        _local.owing = None
    _threadsafe(loop, _finish, future, owed, result, error)


def _finish(
    future: asyncio.Future[Any], owed: _Owed, result: Any, error: BaseException | None
) -> None:
    # The owed callbacks run first, as if the thread had called them one by one, then the
    # caller resumes; one that raises is reported as the loop reports a callback's error.
    for callback, args in owed:
        try:
            callback(*args)
        except Exception as exc:
            future.get_loop().call_exception_handler(
                {"message": f"callback {callback!r} owed by a worker thread", "exception": exc}
            )
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """Run `callback(*args)` on `loop` soon, from any thread.

    On the loop's own thread it is `call_soon`. From a function running under `run_sync`
    for this loop it runs when that function returns (in order, before the caller
    resumes). From any other thread it is `call_soon_threadsafe`. A closed loop drops it.
    """
    owing = getattr(_local, "owing", None)
    if owing is not None and owing[0] is loop:
        owing[1].append((callback, args))
        return
    if on(loop):
        loop.call_soon(callback, *args)
    else:
        _threadsafe(loop, callback, *args)


def on(loop: asyncio.AbstractEventLoop) -> bool:
    """True when the caller runs on `loop` (its own thread, inside it)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _threadsafe(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop closed meanwhile: nothing is left to run it
        pass
