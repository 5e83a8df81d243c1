"""What a sans-IO client flow asks its driver for, and the blocking driver.

A flow (`gate.asking.askflow.decide()`, `gate.asking.aftercall.report_outcome()`, ...) is a
generator: it yields an `Exchange` (an HTTP call it wants made) or a `Pause` (a backoff), is sent a
`Reply` for each exchange, and returns its result. `drive()` runs one with a blocking `send`;
`gate hook` sends with urllib, the SDK with httpx, the MCP servers with anyio, so every
adapter waits, retries and withdraws the same way.

Standard library only, and no `typing` at run time: `gate hook` imports this on every tool
call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

#: connection lost or the server blipped: retry after 0.2, 0.4, ... capped at 2 s
BACKOFF_FIRST, BACKOFF_CAP = 0.2, 2.0


class Exchange:
    """One HTTP call the flow wants made; `path` is relative to the gate URL."""

    __slots__ = ("method", "path", "body", "timeout")

    def __init__(self, method: str, path: str, body: dict[str, Any] | None, timeout: float):
        self.method, self.path, self.body, self.timeout = method, path, body, timeout

    def __repr__(self) -> str:
        return f"Exchange({self.method} {self.path}, timeout={self.timeout:g})"


class Pause:
    """The flow wants to sleep (backoff between retries)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


#: the longest `Retry-After` a flow honours as given: a longer one is waited in pieces of this
RETRY_AFTER_CAP = 30.0


class Reply:
    """The answer to an Exchange: `status` 0 when no HTTP answer arrived; `retry_after`, the
    seconds a `Retry-After` header asked for (`retry_after_of`), when there was one."""

    __slots__ = ("status", "body", "problem", "retry_after")

    def __init__(
        self,
        status: int,
        body: Any = None,
        problem: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status, self.body, self.problem = status, body, problem
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"Reply({self.status}, problem={self.problem!r})"


Step = Exchange | Pause


class Abandoned(Exception):
    """The caller stops waiting (a signal, a cancelled task, Ctrl-C): throw it into a flow.

    `gate.asking.askflow.decide()` answers it by withdrawing its request (or the one its in-flight
    POST may have created) and returning an "abandoned" verdict. `drive()` throws it in itself
    when `send` or `sleep` raises it or `stopped()` names a reason.
    """

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def round_trip(step: Exchange) -> Generator[Step, Reply | None, Reply]:
    """Yield one exchange and return its reply (`yield from` it inside a flow)."""
    reply = yield step
    assert reply is not None, "the driver must send a Reply for every Exchange"
    return reply


def retry_after_of(value: str | None) -> float | None:
    """A `Retry-After` header's delay in seconds (capped at `RETRY_AFTER_CAP`), or None.

    Only the delta-seconds form: gate sends that; a date (a proxy's) is read as none given.
    """
    text = (value or "").strip()
    if not text.isascii() or not text.isdigit():
        return None
    return min(float(text[:6]), RETRY_AFTER_CAP)


def pause_after(reply: Reply, backoff: float, remaining: float) -> Pause:
    """The pause before trying again after a transient `reply`: what its `Retry-After` asks
    (a server shedding load says when to come back), else `backoff`; never past the deadline."""
    wanted = reply.retry_after if reply.retry_after is not None else backoff
    return Pause(max(0.0, min(wanted, remaining)))


def transient(reply: Reply) -> bool:
    """No answer, or one a restart or an overloaded proxy gives: worth trying again."""
    return reply.status == 0 or reply.status in (429, 500, 502, 503, 504)


def is_request(value: Any) -> bool:
    """`value` has the shape of an approval request as the API shows it."""
    return isinstance(value, dict) and isinstance(value.get("id"), str) and "status" in value


def drive(
    flow: Generator[Step, Reply | None, T],
    send: Callable[[Exchange], Reply],
    sleep: Callable[[float], None] = time.sleep,
    stopped: Callable[[], str | None] | None = None,
) -> T:
    """Run a flow to its result (a Verdict, or a Report) with a blocking `send`.

    A stop is thrown into the flow as `Abandoned` and the exchanges it then needs (the
    withdrawal) are still sent: `Abandoned` raised by `send` or `sleep`, Ctrl-C (re-raised
    once the flow is done), or `stopped()` naming a reason before a step. A second stop
    during the withdrawal only cuts it short.
    """
    interrupted: KeyboardInterrupt | None = None
    thrown = False
    try:
        step = next(flow)
        while True:
            reply: Reply | None = None
            try:
                why = None if thrown or stopped is None else stopped()
                if why is not None:
                    raise Abandoned(why)
                if isinstance(step, Pause):
                    sleep(step.seconds)
                else:
                    reply = send(step)
            except (Abandoned, KeyboardInterrupt) as stop:
                if isinstance(stop, KeyboardInterrupt):
                    interrupted = interrupted or stop
                    stop = Abandoned("interrupted (Ctrl-C)")
                if not thrown:
                    thrown = True
                    step = flow.throw(stop)
                    continue
                reply = None if isinstance(step, Pause) else Reply(0, problem=stop.why)
            step = flow.send(reply)
    except StopIteration as done:
        if interrupted is not None:
            raise interrupted from None
        result: T = done.value
        return result


__all__ = [
    "BACKOFF_CAP",
    "BACKOFF_FIRST",
    "Abandoned",
    "Exchange",
    "Pause",
    "Reply",
    "Step",
    "drive",
    "is_request",
    "pause_after",
    "retry_after_of",
    "round_trip",
    "transient",
]
