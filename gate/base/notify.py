"""Wake long-polling waiters and live pages when a request changes.

In one process a future per waiter is all it takes: a waiter costs one future and a timer, no
thread and no database connection. `publish` may be called from worker threads (the sync
service code runs there); it hops onto the event loop through `gate.base.threads.soon`.

Across replicas (PostgreSQL) a subclass adds LISTEN/NOTIFY: `stage()` queues a
`pg_notify` inside the deciding transaction, so the notification is sent if and only if the
decision commits, and every replica's listener turns it into a local `publish`.

The notifier also remembers the last value read of each request (`latest`) for as long as no
change of it was delivered: an agent's next long-poll, sent as soon as the last one ended
pending, is then answered from memory instead of the database. A delivery of the request, or
a `wake_all` (notifications may have been missed), forgets it; the waiters' own periodic
re-read (`gate.api.waiting`) refreshes it, so a value is never older than that safety net.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from gate.base import threads

log = logging.getLogger(__name__)
T = TypeVar("T")

#: requests nobody waits on any more whose last read is still kept, oldest dropped first: an
#: agent polls again right after an answer, so a short memory covers it (~1-4 KB each)
RECENT = 4096


@dataclass(frozen=True)
class Event:
    """Something happened to a request: kind is "created", "changed" or "final"."""

    kind: str
    request_id: str


class Watch:
    """One waiter's registration; `wait()` returns when the request changes or time is up.

    A bare future and a timer, not an asyncio.Event plus `wait_for`: with 10,000 open
    long-polls the Event's deque and `wait_for`'s extra task cost ~2 KB per waiter. It is
    its own context manager (registered for the block) for the same reason.
    """

    __slots__ = ("_fired", "_notifier", "_request_id", "_seen", "_timer", "_value", "_waiter")

    def __init__(self, notifier: Notifier, request_id: str) -> None:
        self._fired = False
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._notifier = notifier
        self._request_id = request_id
        #: a fresh value read for this wake-up (see `Notifier.watch`'s `refresh`), and the
        #: seq of the newest one handed so far: an older read finishing late is not taken
        self._value: Any = None
        self._seen = -1

    def __enter__(self) -> Watch:
        self._notifier._enter(self._request_id, self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.unpark()
        self._notifier._unwatch(self._request_id, self)

    def set(self, value: Any = None, seq: int = -1) -> None:
        """Wake the waiter; with `value`, the request as read after change number `seq`."""
        self._fired = True
        if value is not None and seq > self._seen:
            self._value, self._seen = value, seq
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def park(self, timeout: float) -> asyncio.Future[None] | None:
        """A future done at the next change or in `timeout` seconds; None if one came already.

        Awaited by the caller itself, so a parked waiter holds no coroutine of ours; always
        followed by `unpark()`.
        """
        if self._fired:
            return None
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self._timer = loop.call_later(timeout, _time_up, waiter)
        return waiter

    def unpark(self) -> bool:
        """Drop the timer; True when a change came since the last `unpark`."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiter = None
        woken, self._fired = self._fired, False
        return woken

    def take(self) -> Any:
        """The value read for the latest wake-up (once), or None: the waiter reads itself."""
        value, self._value = self._value, None
        return value

    async def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds; True when woken by a change."""
        waiter = self.park(timeout)
        try:
            if waiter is not None:
                await waiter
        finally:
            woken = self.unpark()
        return woken


def _hand_over(watches: list[Watch], seq: int, read: asyncio.Future[Any]) -> None:
    """Wake `watches` with what the read after change `seq` found (a failed read: without)."""
    ok = not read.cancelled() and read.exception() is None
    value = read.result() if ok else None
    for w in watches:
        w.set(value, seq)


def _time_up(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Notifier:
    """In-process wake-ups, and a broadcast stream of events for live pages."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watches: dict[str, set[Watch]] = {}
        self._waiting = 0  # the watches in `_watches`, counted as they come and go
        self._streams: set[asyncio.Queue[Event | None]] = set()
        #: bumped by every delivery and wake_all: a read begun at seq >= S saw their commits
        self.seq = 0
        self._reads: dict[str, tuple[int, asyncio.Future[Any], float]] = {}
        #: the last value read of a request (and when its read began, loop time), while no
        #: change of it was delivered since: of watched requests, and of `RECENT` others
        self._latest: dict[str, tuple[Any, float]] = {}
        self._recent: OrderedDict[str, tuple[Any, float]] = OrderedDict()
        #: per watched request, how to read it: a change starts one read and hands its
        #: result to every waiter, which then wakes once, with the answer in hand
        self._refresh: dict[str, Callable[[], Awaitable[Any]]] = {}
        #: per watched request, the last value encoded for its waiters and its bytes
        self._encoded: dict[str, tuple[Any, bytes]] = {}
        #: how many times `encoded` had to encode (tests count it: once per change)
        self.encodes = 0
        #: events that are not about a request, by kind: told the event's name, on the loop
        #: (`gate.decisions.denials.TRIPS_EVENT`); and what to run after a gap in notifications
        self.topics: dict[str, Callable[[str], None]] = {}
        self.on_gap: list[Callable[[], None]] = []

    async def start(self) -> None:
        """Bind to the running event loop."""
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        """End every live stream."""
        for queue in list(self._streams):
            queue.put_nowait(None)

    @property
    def waiting(self) -> int:
        """How many long-polls are open right now."""
        return self._waiting

    def latest(self, request_id: str, max_age: float) -> Any:
        """The value last read of `request_id`, if no change of it was delivered since that
        read began and it began at most `max_age` seconds ago; else None (read it)."""
        entry = self._latest.get(request_id) or self._recent.get(request_id)
        if entry is None or self._now() - entry[1] > max_age:
            return None
        return entry[0]

    def _now(self) -> float:
        loop = self._loop or asyncio.get_running_loop()
        return loop.time()

    def _remember(self, request_id: str, value: Any, began: float) -> None:
        if request_id in self._watches:
            self._latest[request_id] = (value, began)
            return
        self._recent[request_id] = (value, began)
        self._recent.move_to_end(request_id)
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)

    def _forget(self, request_id: str) -> None:
        """A change of the request was delivered: nothing read of it before is current."""
        self._latest.pop(request_id, None)
        self._recent.pop(request_id, None)
        # A read still running may have begun before the change: it is not remembered.
        self._reads.pop(request_id, None)

    def watch(self, request_id: str, refresh: Callable[[], Awaitable[Any]] | None = None) -> Watch:
        """Interest in one request, registered for the `with` block it opens.

        With `refresh` (how to read the request; the same for every waiter of it), a change
        is read once, after it is delivered, and the value handed to every waiter with its
        wake-up (`Watch.take`); without, waiters are woken to read for themselves.
        """
        if refresh is not None:
            self._refresh[request_id] = refresh
        return Watch(self, request_id)

    def _enter(self, request_id: str, watch: Watch) -> None:
        watches = self._watches.get(request_id)
        if watches is None:
            watches = self._watches[request_id] = set()
            recent = self._recent.pop(request_id, None)
            if recent is not None:
                self._latest[request_id] = recent
        if watch not in watches:
            watches.add(watch)
            self._waiting += 1

    def _unwatch(self, request_id: str, watch: Watch) -> None:
        watches = self._watches.get(request_id)
        if watches is not None and watch in watches:
            watches.discard(watch)
            self._waiting -= 1
            if not watches:
                del self._watches[request_id]
                self._encoded.pop(request_id, None)
                self._refresh.pop(request_id, None)
                latest = self._latest.pop(request_id, None)
                if latest is not None:
                    self._remember(request_id, *latest)

    def encoded(self, request_id: str, value: T, encode: Callable[[T], bytes]) -> bytes:
        """`encode(value)`, reused for every waiter while the request's value stays equal.

        Call it from the event loop inside a `watch` of `request_id`: the bytes are kept
        while the request has waiters, so 1,000 waiters woken by one decision (or by the
        same decision heard twice, locally and over LISTEN) share one encoding.
        """
        cached = self._encoded.get(request_id)
        if cached is not None and (cached[0] is value or cached[0] == value):
            return cached[1]
        self.encodes += 1
        data = encode(value)
        if request_id in self._watches:
            self._encoded[request_id] = (value, data)
        return data

    def stage(self, session: Any, event: Event) -> None:
        """Queue a cross-replica notification inside the current transaction (PostgreSQL)."""

    def publish(self, event: Event) -> None:
        """Wake local waiters and streams; safe to call from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        if threads.on(loop):
            self._deliver(event)
        else:
            threads.soon(loop, self._deliver, event)

    def wake_all(self) -> None:
        """Wake every waiter so it re-reads the database (after a missed-notification gap)."""
        self.seq += 1
        self._latest.clear()
        self._recent.clear()
        self._reads.clear()
        for caught_up in self.on_gap:
            caught_up()
        for watches in list(self._watches.values()):
            for w in list(watches):
                w.set()

    def _deliver(self, event: Event) -> None:
        topic = self.topics.get(event.kind)
        if topic is not None:
            topic(event.request_id)
            return
        self.seq += 1
        self._forget(event.request_id)
        watches = list(self._watches.get(event.request_id, ()))
        refresh = self._refresh.get(event.request_id)
        if watches and refresh is not None:
            # Begun now, after the commit that sent the event: every waiter gets a view
            # that includes it (and later waiters share this read too).
            read = self._shared(event.request_id, self.seq, refresh)
            read.add_done_callback(partial(_hand_over, watches, self.seq))
        else:
            for w in watches:
                w.set()
        for queue in list(self._streams):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:  # a stalled page; it will resync on reconnect
                log.warning("dropping live event for a slow subscriber")

    async def shared_read(self, request_id: str, since: int, read: Callable[[], Awaitable[T]]) -> T:
        """`read()`, shared by every caller whose `since` is <= the seq when it began.

        Woken waiters of one request join one database read instead of 1,000, yet none gets
        a read begun before the wake-up that concerns it (`since` is the seq it woke at).
        """
        # Shielded: one waiter going away must not cancel the read the others are sharing.
        result: T = await asyncio.shield(self._shared(request_id, since, read))
        return result

    def _shared(
        self, request_id: str, since: int, read: Callable[[], Awaitable[T]]
    ) -> asyncio.Future[T]:
        """The read of `request_id` begun at seq >= `since`, begun now if there is none."""
        entry = self._reads.get(request_id)
        if entry is None or entry[0] < since:
            future: asyncio.Future[T] = asyncio.ensure_future(read())
            entry = (self.seq, future, self._now())
            self._reads[request_id] = entry

            def _done(f: asyncio.Future[Any], key: str = request_id) -> None:
                current = self._reads.get(key) is entry
                if current:
                    del self._reads[key]
                # retrieved here, so a read nobody awaits any more is quiet
                if f.cancelled() or f.exception() is not None:
                    return
                if current and f.result() is not None:  # nothing delivered since it began
                    self._remember(key, f.result(), entry[2])

            future.add_done_callback(_done)
        return entry[1]

    async def stream(self) -> AsyncIterator[Event]:
        """Every event from now on, until the notifier stops."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize=1000)
        self._streams.add(queue)
        try:
            while (event := await queue.get()) is not None:
                yield event
        finally:
            self._streams.discard(queue)
