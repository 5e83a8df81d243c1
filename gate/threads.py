"""Worker threads for blocking work (database transactions), handed off cheaply.

Every ask, decision and card delivery crosses to a worker thread at least once. anyio's
`to_thread.run_sync` costs ~80 us of CPU per crossing here (a capacity limiter, a cancel
scope and an extra pass of the event loop); `loop.run_in_executor` on a plain thread pool
costs ~30 us. The hot paths use `run_sync` below; code elsewhere may keep anyio's.

A caller that is cancelled stops waiting, and the thread finishes its work on its own: a
transaction is never cut in half by a cancellation (as with anyio's shielded threads).

Work a worker thread owes the event loop (waking waiters, kicking the outbox pump) goes
through `soon`: from inside `run_sync` it is handed over when the thread's function returns,
together with the result, instead of waking the loop while the thread still works. A loop
woken early competes with the thread for the GIL for the rest of its transaction, and every
release the database driver makes then costs both threads a futex round trip.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")

#: as many as anyio's default limiter lends: calls beyond wait for a free thread
MAX_WORKERS = 40

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
#: per worker thread: (loop, callbacks) the function running under `run_sync` owes its loop
_local = threading.local()


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="gate-worker")
    return _pool


async def run_sync(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` in a worker thread, with the caller's context variables (the
    request id the logs carry)."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    work = partial(_owing, loop, partial(context.run, function, *args))
    return await loop.run_in_executor(_executor(), work)


def _owing(loop: asyncio.AbstractEventLoop, work: Callable[[], T]) -> T:
    """Run `work`, then hand the loop what it owes (see `soon`), even when it raised: the
    callbacks of a committed change must run whatever happened after the commit."""
    owed: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
    _local.owing = (loop, owed)
    try:
        return work()
    finally:
        _local.owing = None
        if owed:
            # Queued just before the result's own wake-up: they run first, as if the
            # thread had called them one by one, and the loop wakes once.
            _threadsafe(loop, _run_owed, owed)


def _run_owed(owed: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> None:
    for callback, args in owed:
        callback(*args)


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
