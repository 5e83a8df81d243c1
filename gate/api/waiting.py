"""The long-poll: wait for a request's verdict without holding a thread or a connection.

A waiter registers with the notifier before its first read, so a decision that lands in
between still wakes it; then it sleeps on one future and one timer. Waiters of one request
that wake together share one database read, and the answer is serialised once per change
of the request: every waiter of it is sent the same bytes.

Ten thousand parked agents must not keep the process too busy to decide (issue 28, item 7),
so a long-poll is cheap to keep and cheap to renew:

* **long slices, ended at spread-out times**: the server holds a long-poll up to
  `server.max_wait_seconds` (several minutes by default), and ends one it holds to that cap
  at a random point of its last `SLICE_JITTER` share (`slice_seconds`), so agents that came
  together do not all poll again together. A long-poll is never held past its `timeout`.
* **no read to renew**: an agent's next long-poll, sent as soon as one ended pending, takes
  the value the notifier remembers of its request (`Notifier.latest`: no change of it was
  delivered since it was read) instead of reading the database.
* **a safety net on a budget**: a parked waiter wakes on its own now and then to re-read,
  in case a notification was lost; no more often than `RECHECK_SECONDS`, and with many
  waiters, spaced so the process makes about `RECHECKS_PER_SECOND` such wake-ups in all. A
  read of the request begun within half that period (another waiter's) counts as the
  re-read, so it is at most that many reads too. With 10,000 waiters a lost notification is
  found within ~100 s; a PostgreSQL listener that reconnects wakes every waiter at once.
* **reads in their own threads** (`threads.run_for_waiters`): waiters' reads queue behind
  each other, never in front of an ask or a decision.
"""

from __future__ import annotations

import asyncio
import random
from functools import partial
from typing import TYPE_CHECKING

from pydantic import TypeAdapter

from gate.api.schemas import RequestPublic
from gate.base import threads
from gate.base.errors import NotFound

if TYPE_CHECKING:
    from gate.decisions.readmodel import RequestView
    from gate.decisions.service import GateService
    from gate.identity.auth import Principal

#: a waiter re-reads the database this often even without a wake-up, as a safety net for
#: notifications lost while a listener reconnects; jittered so 10k waiters do not align
RECHECK_SECONDS = 10.0
#: ...and with many waiting, no more often than this many wake-ups (and re-reads) a second in
#: all: a re-read costs a few hundred microseconds of CPU, a wake-up tens, so the net takes a
#: few percent of a core (10,000 waiting: each wakes every ~100 s). Unbudgeted, 10,000
#: waiters of one request woke 1,000 times a second, ~20% of a core (PostgreSQL run)
RECHECKS_PER_SECOND = 100.0
#: a long-poll held to the server's cap ends within its last fifth, at random
SLICE_JITTER = 0.2
#: what FastAPI serialises a `response_model=RequestPublic` with
_PUBLIC = TypeAdapter(RequestPublic)


def encode(view: RequestView) -> bytes:
    """The request as the API shows it (`RequestPublic`), as JSON bytes.

    The same bytes FastAPI writes for a `response_model=RequestPublic` route (pydantic's
    `dump_json` by alias); `tests/api/test_wait_route.py` compares the two.
    """
    return _PUBLIC.dump_json(RequestPublic.of(view), by_alias=True)


def slice_seconds(timeout: float, cap: float, draw: float | None = None) -> float:
    """How long one long-poll is held: `timeout`, or when that reaches the server's `cap`,
    a point in the cap's last `SLICE_JITTER` share (`draw` in [0, 1), random by default).

    Never more than `timeout` nor `cap`: a client is never answered later than it asked.
    """
    timeout, cap = max(0.0, timeout), max(0.0, cap)
    if draw is None:
        draw = random.random()
    return min(timeout, cap * (1.0 - SLICE_JITTER * draw))


async def wait(
    service: GateService, request_id: str, principal: Principal, timeout: float
) -> bytes:
    """The request's JSON as soon as it is final, or still pending when `timeout` passes
    (or, earlier, when the slice the server's `max_wait_seconds` allows ends: `slice_seconds`).

    Raises NotFound for an unknown id and Forbidden when `principal` may not read it (an
    agent waits only on what it asked), before waiting at all.
    """
    loop = asyncio.get_running_loop()
    held = slice_seconds(timeout, service.settings.server.max_wait_seconds)
    deadline = loop.time() + held
    notifier = service.notifier
    with notifier.watch(request_id, refresh=partial(_view, service, request_id)) as watch:
        recheck = _recheck_seconds(notifier.waiting)
        # An agent polling again right after an answer: nothing changed since, no read.
        view = notifier.latest(request_id, recheck) or await _read(service, request_id)
        service.check_readable(view, principal)
        while not view.is_final:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            recheck = _recheck_seconds(notifier.waiting)
            parked = watch.park(min(remaining, recheck * random.uniform(0.8, 1.2)))
            if parked is not None:
                await parked
            watch.unpark()
            # A change hands over the view read once for every waiter; a timer (the safety
            # net) or a missed notification (wake_all) leaves the waiter to read: a read of
            # the request begun within half the period does (other waiters of it made it).
            view = (
                watch.take()
                or notifier.latest(request_id, recheck / 2)
                or await _read(service, request_id)
            )
        # Inside the watch: the encoding is kept for the other waiters of this request.
        return notifier.encoded(request_id, view, encode)


def _recheck_seconds(waiting: int) -> float:
    """How long a waiter sleeps before its safety-net re-read, with `waiting` waiters."""
    return max(RECHECK_SECONDS, waiting / RECHECKS_PER_SECOND)


async def _view(service: GateService, request_id: str) -> RequestView | None:
    """The request read in a worker thread (None when there is no such request)."""
    return await threads.run_for_waiters(service.view, request_id)


async def _read(service: GateService, request_id: str) -> RequestView:
    """The request, from a database read shared with the other waiters of it."""
    notifier = service.notifier
    # `seq` makes sure no waiter gets a shared read begun before the change that concerns it.
    view = await notifier.shared_read(request_id, notifier.seq, partial(_view, service, request_id))
    if view is None:
        raise NotFound(f"no request with id {request_id!r}", code="request_not_found")
    return view
