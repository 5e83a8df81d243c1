"""An app's access token for a platform's API, as Feishu, WeCom and Teams hand them out.

Fetched once and shared: callers waiting while a fetch runs get its token, not a fetch of
their own. Kept until shortly before it expires (a short-lived token keeps at least half its
life, for tests and clock skew). A token the platform refused is passed back as `stale` and
never handed out again, so a revoked or early-expired token costs one refresh, not a loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class AppToken:
    """One cached token; `fetch` returns (token, lifetime in seconds) or raises."""

    def __init__(
        self,
        fetch: Callable[[], Awaitable[tuple[str, float]]],
        *,
        clock: Callable[[], float],
        margin: float,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._margin = margin
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def get(self, stale: str | None = None) -> str:
        """The cached token, or one fresh fetch shared by every caller waiting on the lock.

        `stale` is a token the platform refused: it is not handed out again.
        """
        async with self._lock:
            token = self._token
            if token is not None and self._clock() < self._expires and token != stale:
                return token
            token, lifetime = await self._fetch()
            margin = min(self._margin, lifetime / 2)
            self._token, self._expires = token, self._clock() + lifetime - margin
            return token
