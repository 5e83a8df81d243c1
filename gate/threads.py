"""Worker threads for blocking work (database transactions), handed off cheaply.

Every ask, decision and card delivery crosses to a worker thread at least once. anyio's
`to_thread.run_sync` costs ~80 us of CPU per crossing here (a capacity limiter, a cancel
scope and an extra pass of the event loop); `loop.run_in_executor` on a plain thread pool
costs ~30 us. The hot paths use `run_sync` below; code elsewhere may keep anyio's.

A caller that is cancelled stops waiting, and the thread finishes its work on its own: a
transaction is never cut in half by a cancellation (as with anyio's shielded threads).
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
    return await loop.run_in_executor(_executor(), partial(context.run, function, *args))
