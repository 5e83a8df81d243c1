"""Web sign-in that cannot starve the API or be guessed at speed, and sign-out that sticks.

* **Rate limits.** Each password check costs an argon2 hash (tens of milliseconds and 64 MiB
  at the default parameters), so attempts are limited per client address and per user
  name with token buckets: a client gets `CLIENT_BURST` tries, then one every
  `CLIENT_REFILL_SECONDS`; a name (whoever tries it) `NAME_BURST`, then one every
  `NAME_REFILL_SECONDS`. A success gives both tokens back. The buckets are rows of the
  database every replica shares (one write transaction per attempt, beside an argon2
  hash that costs far more), so N replicas give a guesser the rate of one. The client is
  the connection's address: `X-Forwarded-For` counts only from `[server].trusted_proxies`,
  or a guesser on loopback would name a new client with each try.
* **Own pool.** Checks run on `PASSWORD_THREADS` threads of their own (an anyio
  CapacityLimiter), so a burst of sign-ins never takes the threads the API decides on; at
  most `MAX_WAITING` more wait for one, and beyond that sign-in says "busy" at once.
* **Revocable sessions.** A sign-in is a `web_sign_in` row; the cookie carries a random id
  whose SHA-256 is the row's key. Sign-out revokes the row, so an old cookie replayed
  later (another tab, a copied cookie) is refused by every replica sharing the database,
  after restarts too.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import anyio

from gate.identity.authmethod import PASSWORD, AuthMethod
from gate.store import rows, signins
from gate.store.db import Database
from gate.web.session import SignInRecord

#: a burst of ten tries per address, then one every six seconds (ten a minute)
CLIENT_BURST = 10
CLIENT_REFILL_SECONDS = 6.0
#: five tries per name, then one every thirty seconds: two a minute, whoever is guessing
NAME_BURST = 5
NAME_REFILL_SECONDS = 30.0
#: in-process buckets kept per table (`TokenBuckets`, the reveal limit's); full ones are
#: dropped first (an idle bucket is a fresh one)
MAX_TRACKED = 10_000
#: argon2 is memory-hard (64 MiB each at the default parameters): two at once on two cores
PASSWORD_THREADS = 2
#: sign-ins queued for a thread beyond that are told to retry (each would wait ~100 ms more)
MAX_WAITING = 32
#: longer passwords are refused unchecked (argon2 takes any length; nobody types this much)
MAX_PASSWORD = 1024


@dataclass
class _Bucket:
    tokens: float
    at: float


class TokenBuckets:
    """Token buckets by key: `burst` tokens, one more every `refill_seconds`."""

    def __init__(self, burst: int, refill_seconds: float, clock: Callable[[], float]) -> None:
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def _current(self, key: str) -> _Bucket:
        now = self.clock()
        bucket = self._buckets.pop(key, None)  # re-inserted below: most recent last
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
        else:
            gained = (now - bucket.at) / self.refill_seconds
            bucket = _Bucket(min(float(self.burst), bucket.tokens + gained), now)
        self._buckets[key] = bucket
        self._prune()
        return bucket

    def wait(self, key: str) -> float:
        """Seconds until `key` has a token (0 when it has one now)."""
        bucket = self._current(key)
        return 0.0 if bucket.tokens >= 1 else (1 - bucket.tokens) * self.refill_seconds

    def take(self, key: str) -> None:
        """Spend one of `key`'s tokens (call after `wait` said 0)."""
        self._current(key).tokens -= 1

    def give_back(self, key: str) -> None:
        """Return a token spent on an attempt that succeeded."""
        bucket = self._current(key)
        bucket.tokens = min(float(self.burst), bucket.tokens + 1)

    def _prune(self) -> None:
        if len(self._buckets) <= MAX_TRACKED:
            return
        now = self.clock()
        full = [
            key
            for key, b in self._buckets.items()
            if b.tokens + (now - b.at) / self.refill_seconds >= self.burst
        ]
        for key in full:
            del self._buckets[key]
        while len(self._buckets) > MAX_TRACKED:  # all busy: forget the least recently used
            del self._buckets[next(iter(self._buckets))]


@dataclass(frozen=True)
class Limit:
    """A token bucket's shape: `burst` tokens, one more every `refill_seconds`."""

    burst: int
    refill_seconds: float

    def now(self, tokens: float, at: datetime, now: datetime) -> float:
        """The tokens a bucket holding `tokens` at `at` holds at `now`."""
        gained = max(0.0, (now - at).total_seconds()) / self.refill_seconds
        return min(float(self.burst), tokens + gained)

    def wait(self, tokens: float) -> float:
        """Seconds until a bucket holding `tokens` has one."""
        return 0.0 if tokens >= 1 else (1 - tokens) * self.refill_seconds


CLIENT = Limit(CLIENT_BURST, CLIENT_REFILL_SECONDS)
NAME = Limit(NAME_BURST, NAME_REFILL_SECONDS)
#: a bucket untouched this long is full again, as good as new: its row is dropped
IDLE = timedelta(seconds=max(b.burst * b.refill_seconds for b in (CLIENT, NAME)))


class SignInLimiter:
    """Sign-in attempts per client address and per user name, counted in the database
    (`sign_in_bucket`, SQL in `gate.store.rows`): every replica spends from the same buckets."""

    def __init__(self, db: Database, clock: Callable[[], datetime]) -> None:
        self.db = db
        self.clock = clock
        self.pool = anyio.CapacityLimiter(PASSWORD_THREADS)

    def admit(self, client: str, name: str) -> int:
        """0 and one token of each spent, or the whole seconds to wait before trying again
        (blocking: run it on a thread)."""
        return self._spend(client, name, -1.0)

    def succeeded(self, client: str, name: str) -> None:
        """The password was right: the attempt costs nothing (blocking)."""
        self._spend(client, name, +1.0)

    def _spend(self, client: str, name: str, change: float) -> int:
        limits = {f"client:{client[:200]}": CLIENT, f"name:{_name_key(name)}": NAME}
        with self.db.write_conn() as conn:
            now = self.clock()
            fresh = {key: float(limit.burst) for key, limit in limits.items()}
            held = rows.lock_buckets(conn, fresh, now, now - IDLE)
            tokens = {key: limits[key].now(*held[key], now) for key in limits}
            wait = max(limits[key].wait(t) for key, t in tokens.items())
            if change < 0 and wait > 0:
                return math.ceil(wait)
            caps = {key: float(limit.burst) for key, limit in limits.items()}
            rows.set_buckets(conn, {k: min(caps[k], t + change) for k, t in tokens.items()}, now)
        return 0

    @property
    def busy(self) -> bool:
        """True when `MAX_WAITING` checks already wait for a password thread."""
        return self.pool.statistics().tasks_waiting >= MAX_WAITING


def _name_key(name: str) -> str:
    # "Alice" and "alice " are the same guess at the same account.
    return name.strip().lower()[:200]


# -- sessions in the database ----------------------------------------------------------------


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SignIns:
    """Web sign-ins as `web_sign_in` rows: created at sign-in, revoked at sign-out."""

    def __init__(
        self, db: Database, *, max_age_seconds: int, clock: Callable[[], datetime]
    ) -> None:
        self.db = db
        self.max_age = timedelta(seconds=max_age_seconds)
        self.clock = clock

    def start(
        self,
        approver: str,
        auth: AuthMethod = PASSWORD,
        *,
        groups: frozenset[str] = frozenset(),
        nonce: str | None = None,
        max_age: timedelta | None = None,
    ) -> str:
        """Record a sign-in for `approver` (made by `auth`); the random session id for the
        cookie. A single sign-on consumes its `nonce` here: the row keeps its digest, unique,
        so the same nonce never signs in twice (`sqlalchemy.exc.IntegrityError` if it did).
        `max_age` shortens the sign-in (to the ID token's life, say)."""
        session_id = secrets.token_urlsafe(32)
        now = self.clock()
        life = min(self.max_age, max_age) if max_age is not None else self.max_age
        signins.record(
            self.db,
            digest=_digest(session_id),
            approver=approver,
            now=now,
            expires_at=now + life,
            auth=auth.to_json() | {"groups": sorted(groups)},
            nonce=_digest(nonce) if nonce is not None else None,
        )
        return session_id

    def approver_of(self, session_id: str) -> SignInRecord | None:
        """Who a session id belongs to and how they signed in, unless it was revoked or is
        too old."""
        row = signins.find(self.db, _digest(session_id))
        if row is None or row.revoked_at is not None or row.expires_at <= self.clock():
            return None
        stored = row.auth or {}
        groups = stored.get("groups") if isinstance(stored.get("groups"), list) else []
        return SignInRecord(
            row.approver,
            AuthMethod.from_json(stored) or PASSWORD,
            frozenset(str(g) for g in groups or []),
        )

    def revoke(self, session_id: str) -> None:
        """End a sign-in for good (sign-out); a no-op for an unknown id."""
        signins.revoke(self.db, _digest(session_id), self.clock())
