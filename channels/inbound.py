"""Reading what a chat platform sends, for every channel: secrets compared as bytes, JSON
bodies that may be hostile, and deliveries acted on once.

A callback arrives from the internet. Until its signature is checked it is anyone's bytes,
and even a signed one can be delivered twice (a platform retry) or replayed inside the
signature's time window, and what a signature covers is only what the platform relayed: a
modified client chooses its texts and its buttons' values. These helpers keep each of those
from reaching gate as a 500 or as a second action: text that is not Unicode (a lone
surrogate, which JSON can spell as `"\\ud800"`) becomes U+FFFD as it is parsed, and a deadline
a button carries is read only when it is one a datetime can hold, in UTC.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: an ISO 8601 time with offset and microseconds is 32 characters; more is not a deadline
_MAX_ISO = 40


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

    Every string in the result is valid Unicode: a lone surrogate (no platform sends one, a
    crafted body can) is replaced by U+FFFD here, once for every channel, so a reason or an
    edit holding one is recorded instead of failing where it is stored or sent on.
    """
    try:
        value = json.loads(raw)
        return _sound(value) if _may_hold_surrogates(raw) else value
    except RecursionError:
        raise NestedTooDeep("the JSON is nested too deeply") from None


def _may_hold_surrogates(raw: str | bytes) -> bool:
    """Whether a JSON body could hold a lone surrogate: an escape (`\\udc00`), or in UTF-8
    its three bytes (starting 0xED, which `json.loads` decodes with surrogatepass); UTF-16 and
    UTF-32 bodies (json.loads reads them too) can hold one as such. Any other body is not
    walked."""
    if isinstance(raw, str):
        return "\\u" in raw or not raw.isascii() and sound_text(raw) != raw
    if not json.detect_encoding(raw).startswith("utf-8"):
        return True
    return b"\\u" in raw or b"\xed" in raw


def sound_text(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (the text as it can be stored)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _sound(value: Any) -> Any:
    if isinstance(value, str):
        return sound_text(value)
    if isinstance(value, list):
        return [_sound(item) for item in value]
    if isinstance(value, dict):
        return {sound_text(key): _sound(item) for key, item in value.items()}
    return value


def deadline_from_micros(text: str) -> datetime:
    """A deadline carried as whole microseconds since the epoch (a card's Extend button);
    ValueError when it is not digits or is past what a datetime holds (year 9999)."""
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 20):
        raise ValueError("the Extend button carries no valid deadline")
    try:
        return _EPOCH + timedelta(microseconds=int(text))
    except OverflowError:
        raise ValueError("the Extend button carries no valid deadline") from None


def deadline_from_iso(text: str) -> datetime:
    """A deadline carried as ISO 8601 text with a time zone, in UTC; ValueError when it is
    unreadable, has no time zone, or lies outside what a datetime holds once in UTC
    (`9999-12-31T23:59:59-05:00` reads, but is past year 9999 in UTC)."""
    if len(text) > _MAX_ISO:
        raise ValueError("the Extend button carries no valid deadline")
    try:
        when = datetime.fromisoformat(text)
        if when.tzinfo is None:
            raise ValueError("the Extend button's deadline has no time zone")
        return when.astimezone(UTC)
    except OverflowError:
        raise ValueError("the Extend button carries no valid deadline") from None


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


__all__ = [
    "NestedTooDeep",
    "Once",
    "deadline_from_iso",
    "deadline_from_micros",
    "load_json",
    "same_secret",
    "sound_text",
]
