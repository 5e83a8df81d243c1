"""Reading what a chat platform sends, for every channel: secrets compared as bytes, JSON
bodies that may be hostile, and deliveries acted on once.

A callback arrives from the internet. Until its signature is checked it is anyone's bytes,
and even a signed one can be delivered twice (a platform retry) or replayed inside the
signature's time window. These helpers keep each of those from reaching gate as a 500 or
as a second action.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def same_secret(sent: str, expected: str) -> bool:
    """Constant-time equality of a received secret or signature and the expected one.

    `hmac.compare_digest` raises TypeError for a str that is not ASCII, and header values
    and JSON strings can be anything: comparing their UTF-8 bytes makes any text a plain
    mismatch (surrogates too, via surrogatepass) instead of an exception.
    """
    return hmac.compare_digest(
        sent.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


class NestedTooDeep(ValueError):
    """JSON nested deeper than Python's parser can follow."""


def load_json(raw: str | bytes) -> Any:
    """`json.loads`, with every way it can fail raised as ValueError.

    Python's parser recurses once per nesting level, so a body of a few thousand `[`
    raises RecursionError, which is not a ValueError and would otherwise become a 500.
    """
    try:
        return json.loads(raw)
    except RecursionError:
        raise NestedTooDeep("the JSON is nested too deeply") from None


class Once(Generic[T]):
    """Acts on each delivery key once per process; a repeat waits for the first answer.

    `run(key, work)` runs `work` for a new key. A repeat of a key still remembered (a
    platform retry, or a signed body replayed inside its window) gets the first run's
    answer without running `work` again, also when it arrives while the first is still
    running. If the first run fails, the key is forgotten, so the next delivery tries again.

    Keys are remembered for `window` seconds (None: until crowded out) and at most `size` of
    them; a window as long as the signature's replay window means any replay old enough to
    be forgotten is also too old to pass the signature check.
    """

    def __init__(
        self, *, size: int, window: float | None = None, clock: Callable[[], float]
    ) -> None:
        self._size = size
        self._window = window
        self._clock = clock
        self._seen: OrderedDict[str, tuple[float, asyncio.Future[T]]] = OrderedDict()

    async def run(self, key: str, work: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """(the answer, whether this delivery was a repeat)."""
        self._forget_old()
        while (entry := self._seen.get(key)) is not None:
            first = entry[1]
            try:
                return await asyncio.shield(first), True
            except asyncio.CancelledError:
                if not first.cancelled():
                    raise  # this delivery itself was cancelled
            except Exception:
                pass  # the first run failed and forgot the key: this delivery tries again
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._seen[key] = (self._clock(), future)
        while len(self._seen) > self._size:
            self._seen.popitem(last=False)
        try:
            answer = await work()
        except BaseException as exc:
            if key in self._seen and self._seen[key][1] is future:
                del self._seen[key]
            if isinstance(exc, Exception):
                future.set_exception(exc)
                future.exception()  # retrieved: a lone failure must not warn at shutdown
            else:
                future.cancel()
            raise
        future.set_result(answer)
        return answer, False

    def _forget_old(self) -> None:
        if self._window is None:
            return
        oldest = self._clock() - self._window
        while self._seen:
            at, _ = next(iter(self._seen.values()))
            if at >= oldest:
                break
            self._seen.popitem(last=False)


__all__ = ["NestedTooDeep", "Once", "load_json", "same_secret"]
