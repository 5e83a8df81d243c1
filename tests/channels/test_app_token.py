"""The token cache Feishu, WeCom and Teams share: one fetch for many callers, a refused token
never handed out again, and a refresh shortly before expiry."""

from __future__ import annotations

import asyncio

from channels.app_token import AppToken


class Platform:
    """A token endpoint that counts its calls and takes a moment to answer."""

    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.issued = 0

    async def fetch(self) -> tuple[str, float]:
        await asyncio.sleep(0.01)
        self.issued += 1
        return f"t{self.issued}", self.lifetime


async def test_concurrent_callers_share_one_fetch_and_a_refused_token_is_replaced() -> None:
    now = [1000.0]
    platform = Platform(lifetime=7200)
    tokens = AppToken(platform.fetch, clock=lambda: now[0], margin=300)

    got = await asyncio.gather(*(tokens.get() for _ in range(20)))

    assert got == ["t1"] * 20 and platform.issued == 1
    assert await tokens.get(stale="t1") == "t2"  # refused: fetched again, once
    assert await tokens.get(stale="t1") == "t2"  # a late caller with the same stale token
    assert platform.issued == 2


async def test_a_token_is_replaced_shortly_before_it_expires() -> None:
    now = [1000.0]
    platform = Platform(lifetime=7200)
    tokens = AppToken(platform.fetch, clock=lambda: now[0], margin=300)
    assert await tokens.get() == "t1"
    now[0] += 7200 - 301
    assert await tokens.get() == "t1"
    now[0] += 2
    assert await tokens.get() == "t2"
    # A short-lived token keeps half its life, whatever the margin.
    short = AppToken(Platform(lifetime=10).fetch, clock=lambda: now[0], margin=300)
    first = await short.get()
    now[0] += 4.9
    assert await short.get() == first
