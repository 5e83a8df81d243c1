"""The SDK's side of the sans-IO flows: httpx answers as `Reply`s, an asyncio driver, and
the typed error a raw API call raises."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from gate.asking import tracecontext
from gate.asking.askflow import Flow
from gate.asking.exchange import Abandoned, Exchange, Pause, Reply, retry_after_of
from gate.asking.toolcall import Verdict


class GateAPIError(Exception):
    """The server answered a raw API call with an error body (`{"error": {code, message}}`)."""

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message, self.body = status, code, message, body


async def drive_async(flow: Flow, send: Callable[[Exchange], Awaitable[Reply]]) -> Verdict:
    """Run a flow to its verdict with an async `send`.

    A cancelled task withdraws its request before the cancellation goes on: the flow gets
    `Abandoned`, its withdrawal is sent, then `CancelledError` is raised again. A second
    cancellation during the withdrawal cuts it short.
    """
    cancelled: asyncio.CancelledError | None = None
    try:
        step = next(flow)
        while True:
            reply: Reply | None = None
            try:
                if isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                else:
                    reply = await send(step)
            except asyncio.CancelledError as exc:
                if cancelled is None:
                    cancelled = exc
                    step = flow.throw(Abandoned("the waiting task was cancelled"))
                    continue
                reply = None if isinstance(step, Pause) else Reply(0, problem="cancelled")
            step = flow.send(reply)
    except StopIteration as stop:
        if cancelled is not None:
            raise cancelled from None
        verdict: Verdict = stop.value
        return verdict


def send(http: httpx.Client, exchange: Exchange) -> Reply:
    """Make one exchange of a flow over httpx; a transport failure is `Reply(0, problem)`.

    Whatever the server answers comes back as a `Reply`, never as an exception: a body
    that cannot be read is a reply with a problem (a deny), not a failure of the caller.
    """
    try:
        with http.stream(
            exchange.method,
            exchange.path,
            json=exchange.body,
            timeout=exchange.timeout,
            headers=tracecontext.headers(),  # the caller's trace, when it has one
        ) as response:
            try:
                response.read()
            except httpx.DecodingError as exc:
                return undecodable(response, exc)
    except httpx.TransportError as exc:
        return no_reply(exc, exchange.timeout)
    return reply_of(response)


async def send_async(http: httpx.AsyncClient, exchange: Exchange) -> Reply:
    """`send()` on an event loop."""
    try:
        async with http.stream(
            exchange.method,
            exchange.path,
            json=exchange.body,
            timeout=exchange.timeout,
            headers=tracecontext.headers(),  # the caller's trace, when it has one
        ) as response:
            try:
                await response.aread()
            except httpx.DecodingError as exc:
                return undecodable(response, exc)
    except httpx.TransportError as exc:
        return no_reply(exc, exchange.timeout)
    return reply_of(response)


def undecodable(response: httpx.Response, exc: httpx.DecodingError) -> Reply:
    """A reply whose body its `Content-Encoding` does not decode: it came (so the server is
    not unreachable), and it is no gate answer."""
    encoding = response.headers.get("content-encoding", "none")[:40]
    return Reply(
        response.status_code,
        None,
        problem=f"the reply's body does not decode as its Content-Encoding ({encoding}): {exc}",
    )


def reply_of(response: httpx.Response) -> Reply:
    """An httpx response as the flows read it: JSON, or a problem saying what came instead."""
    retry = retry_after_of(response.headers.get("retry-after"))
    try:
        body = response.json() if response.content else None
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser recurses
        # Say what came back, not what it said: the text is for the model to read.
        ctype = response.headers.get("content-type", "no content type").split(";")[0]
        size = len(response.content)
        return Reply(
            response.status_code,
            None,
            problem=f"the reply is not JSON ({ctype.strip()[:60]}, {size} bytes)",
            retry_after=retry,
        )
    return Reply(response.status_code, body, retry_after=retry)


def no_reply(exc: httpx.TransportError, timeout: float) -> Reply:
    """A transport failure as the flows read it: status 0 and what went wrong, in words."""
    if isinstance(exc, httpx.TimeoutException):
        problem = f"no answer within {timeout:g} s"
    elif isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        problem = "connection refused" if "refused" in text else f"cannot connect: {exc}"
    else:
        problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return Reply(0, problem=problem)


def unwrap(reply: Reply) -> Any:
    """The body of a 2xx reply; GateAPIError for anything else (status 0: unreachable)."""
    if reply.status == 0:
        raise GateAPIError(0, "unreachable", reply.problem or "no answer")
    if 200 <= reply.status < 300:
        return reply.body
    err = reply.body.get("error") if isinstance(reply.body, dict) else None
    if isinstance(err, dict):
        code, message = str(err.get("code")), str(err.get("message"))
    else:
        code, message = "http_error", reply.problem or f"HTTP {reply.status}"
    raise GateAPIError(reply.status, code, message, reply.body)


__all__ = [
    "GateAPIError",
    "drive_async",
    "no_reply",
    "reply_of",
    "send",
    "send_async",
    "undecodable",
    "unwrap",
]
