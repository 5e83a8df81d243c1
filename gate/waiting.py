"""The long-poll: wait for a request's verdict without holding a thread or a connection.

A waiter registers with the notifier before its first read, so a decision that lands in
between still wakes it; then it sleeps on one future and one timer. Waiters of one request
that wake together share one database read.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING

import anyio

from gate.errors import NotFound

if TYPE_CHECKING:
    from gate.auth import Principal
    from gate.readmodel import RequestView
    from gate.service import GateService

#: a waiter re-reads the database this often even without a wake-up, as a safety net for
#: notifications lost while a listener reconnects; jittered so 10k waiters do not align
RECHECK_SECONDS = 10.0


async def wait(
    service: GateService, request_id: str, principal: Principal, timeout: float
) -> RequestView:
    """Return as soon as the request is final, or the still-pending request at `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    notifier = service.notifier

    async def read() -> RequestView:
        # `seq` makes sure no waiter gets a shared read begun before the change that concerns it.
        view = await notifier.shared_read(
            request_id, notifier.seq, lambda: anyio.to_thread.run_sync(service.view, request_id)
        )
        if view is None:
            raise NotFound(f"no request with id {request_id!r}", code="request_not_found")
        return view

    with notifier.watch(request_id) as watch:
        view = await read()
        service.check_readable(view, principal)
        while not view.is_final:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await watch.wait(min(remaining, RECHECK_SECONDS * random.uniform(0.8, 1.2)))
            view = await read()
    return view
