"""The long-poll: wait for a request's verdict without holding a thread or a connection.

A waiter registers with the notifier before its first read, so a decision that lands in
between still wakes it; then it sleeps on one future and one timer. Waiters of one request
that wake together share one database read, and the answer is serialised once per change
of the request: every waiter of it is sent the same bytes.
"""

from __future__ import annotations

import asyncio
import random
from functools import partial
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from gate import threads
from gate.errors import NotFound
from gate.schemas import RequestPublic

if TYPE_CHECKING:
    from gate.auth import Principal
    from gate.readmodel import RequestView
    from gate.service import GateService

#: a waiter re-reads the database this often even without a wake-up, as a safety net for
#: notifications lost while a listener reconnects; jittered so 10k waiters do not align
RECHECK_SECONDS = 10.0
#: what FastAPI serialises a `response_model=RequestPublic` with
_PUBLIC = TypeAdapter(RequestPublic)


def encode(view: RequestView) -> bytes:
    """The request as the API shows it (`RequestPublic`), as JSON bytes.

    The same bytes FastAPI writes for a `response_model=RequestPublic` route (pydantic's
    `dump_json` by alias); `tests/api/test_wait_route.py` compares the two.
    """
    return _PUBLIC.dump_json(RequestPublic.of(view), by_alias=True)


async def wait(
    service: GateService, request_id: str, principal: Principal, timeout: float
) -> bytes:
    """The request's JSON as soon as it is final, or still pending when `timeout` passes.

    Raises NotFound for an unknown id and Forbidden when `principal` may not read it (an
    agent waits only on what it asked), before waiting at all.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    notifier = service.notifier
    with notifier.watch(request_id, refresh=partial(_view, service, request_id)) as watch:
        view = await _read(service, request_id)
        service.check_readable(view, principal)
        while not view.is_final:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            parked = watch.park(min(remaining, RECHECK_SECONDS * random.uniform(0.8, 1.2)))
            if parked is not None:
                await parked
            watch.unpark()
            # A change hands over the view read once for every waiter; a timer or a missed
            # notification (wake_all) leaves the waiter to read for itself.
            view = watch.take() or await _read(service, request_id)
        # Inside the watch: the encoding is kept for the other waiters of this request.
        return notifier.encoded(request_id, view, encode)


async def _view(service: GateService, request_id: str) -> RequestView | None:
    """The request read in a worker thread (None when there is no such request)."""
    return await threads.run_sync(service.view, request_id)


async def _read(service: GateService, request_id: str) -> RequestView:
    """The request, from a database read shared with the other waiters of it."""
    notifier = service.notifier
    # `seq` makes sure no waiter gets a shared read begun before the change that concerns it.
    view = await notifier.shared_read(request_id, notifier.seq, partial(_view, service, request_id))
    if view is None:
        raise NotFound(f"no request with id {request_id!r}", code="request_not_found")
    return view
