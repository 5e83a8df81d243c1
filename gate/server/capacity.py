"""How many connections gate holds, and how many of them waiting may take.

Every open socket costs a file descriptor, and the process has `RLIMIT_NOFILE` of them for
sockets, the database (SQLite: the file, its -wal and -shm per connection), logs and the
channels' HTTP pools. So:

* **the connection cap** follows the open-file limit: `gate serve` raises its soft limit to
  the hard one where allowed (`raise_open_file_limit`), then holds as many sockets as that
  leaves after `reserved_fds`, up to `DEFAULT_CEILING` (each held connection costs ~10-12 KB
  resident); `max_connections` sets it instead (still lowered to fit). A socket over the cap
  is answered 503 at once (`gate.server.serve`).
* **a reserve no long-poll may take**: parked `GET /v1/requests/{id}/wait` calls may hold
  the cap minus `reserved_connections` (by default a tenth of the cap, at least 32), so
  asks, decisions and the console always find connections, however many agents wait. A
  long-poll over that is refused at once with 503 `too_many_waiters` and a `Retry-After`
  (`WAIT_RETRY_SECONDS`, spread so refused waiters do not come back together), which
  `gate hook` and the SDK follow within their own deadline.
"""

from __future__ import annotations

import random
import resource

from gate.base.errors import TooManyWaiters
from gate.config.settings import Settings

#: descriptors the process needs besides client sockets: stdio, log files, the listening
#: socket, the event loop's epoll and wake-up pipe, channel HTTP clients' pools, alembic
RESERVED_FDS = 64
#: each database connection: SQLite holds the file, its -wal and its -shm (PostgreSQL one socket)
FDS_PER_DB_CONNECTION = 3
#: the default cap however high the open-file limit goes (containers often allow 1,048,576):
#: 65,536 held connections are ~0.7-0.8 GB resident
DEFAULT_CEILING = 65_536
#: the default reserve: this share of the cap, and at least this many (at most half the cap)
RESERVE_SHARE = 0.10
MIN_RESERVE = 32
#: a refused long-poll is told to come back after this many seconds, drawn at random per
#: answer: refused waiters then return spread over three seconds, not all at once
WAIT_RETRY_SECONDS = (1, 4)


def open_file_limit() -> int | None:
    """The soft RLIMIT_NOFILE of this process, or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def raise_open_file_limit() -> int | None:
    """Raise the soft open-file limit to the hard one where allowed; the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and soft != resource.RLIM_INFINITY:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # a hard limit the kernel refuses (over fs.nr_open)
            pass
    return open_file_limit()


def reserved_fds(settings: Settings) -> int:
    """Descriptors kept free for everything but client sockets."""
    # PostgreSQL: the pool plus its overflow; SQLite's default pool holds up to 15.
    db_connections = max(settings.server.db_pool_size + settings.server.db_pool_overflow, 15)
    return RESERVED_FDS + FDS_PER_DB_CONNECTION * db_connections


def connection_cap(settings: Settings, nofile: int | None) -> int:
    """How many sockets gate holds at once: `max_connections` (default `DEFAULT_CEILING`),
    lowered to fit under `nofile`."""
    wanted = settings.server.max_connections or DEFAULT_CEILING
    if nofile is None:
        return wanted
    return max(1, min(wanted, nofile - reserved_fds(settings)))


def connection_reserve(settings: Settings, cap: int) -> int:
    """Connections of `cap` that long-polls may never take (`reserved_connections`)."""
    reserved = settings.server.reserved_connections
    if reserved is None:
        reserved = max(MIN_RESERVE, round(cap * RESERVE_SHARE))
        reserved = min(reserved, cap // 2)
    return max(1, min(reserved, cap - 1)) if cap > 1 else 0


class Capacity:
    """The long-polls this process holds, against how many it may (the cap minus the reserve)."""

    __slots__ = ("connections", "reserve", "held", "refused")

    def __init__(self, connections: int, reserve: int) -> None:
        #: the connection cap, and the part of it long-polls may not take
        self.connections = connections
        self.reserve = reserve
        #: long-polls parked right now, and how many were refused since start
        self.held = 0
        self.refused = 0

    @classmethod
    def of(cls, settings: Settings, nofile: int | None) -> Capacity:
        """The capacity `settings` give under an open-file limit of `nofile`."""
        cap = connection_cap(settings, nofile)
        return cls(cap, connection_reserve(settings, cap))

    @property
    def waits(self) -> int:
        """How many long-polls may be parked at once."""
        return max(0, self.connections - self.reserve)

    def hold(self) -> None:
        """Take a place for one long-poll (give it back with `release`); TooManyWaiters when
        waiting already holds every connection it may."""
        if self.held >= self.waits:
            self.refused += 1
            retry = random.randint(*WAIT_RETRY_SECONDS)
            raise TooManyWaiters(
                f"gate holds {self.held} waiting calls, as many as it may while keeping "
                f"{self.reserve} connections for asks and decisions; wait again in {retry} s",
                retry_after=retry,
            )
        self.held += 1

    def release(self) -> None:
        """Give back the place `hold` took."""
        self.held -= 1
