"""The long-poll, answered ahead of the middleware stack: a parked waiter is a future and a timer.

`GET /v1/requests/{id}/wait` is the route that holds thousands of connections open at once.
Through FastAPI each parked waiter kept a coroutine frame per middleware layer, Starlette's
exception wrappers, the dependency solver's exit stacks and a Request: ~20 KB on top of
uvicorn's own connection. `GateAPI` answers a plain GET of it with `LongPoll` straight from
the ASGI scope instead, running the same checks through the same functions:

* the same-origin guard (`SameOriginGuard.refusal`: the Host check in local mode),
* the body and URL limits (`nothing_to_limit`: only bodiless requests without a NUL),
* the bearer token (`TokenBook.authenticate`), then `GateService.check_readable` (an agent
  waits only on what it asked) in `waiting.wait`,
* the `timeout` query: plain decimal seconds in range,
* `X-Request-ID` (`request_id_of`) and the console's security headers on every answer.

A request it does not serve plainly (a guard refusal, a body, a NUL, an unusual or invalid
`timeout`, HEAD, a root path) goes to the full stack, which answers it exactly as before
(the same 421, 413 or 422). Errors it meets itself (401, 403, 404, a database failure) are
rendered by the app's registered exception handlers, so their bodies are the one error shape.
The FastAPI route stays declared: it documents the route (OpenAPI) and answers what is
handed over, with the same bytes (`waiting.encode`, once per change of the request).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine
from typing import Any
from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gate import waiting
from gate.api.guard import SameOriginGuard
from gate.api.middleware import nothing_to_limit, request_id_of, request_id_var
from gate.api.v1 import WAIT_TIMEOUT_DEFAULT, WAIT_TIMEOUT_MAX
from gate.state import AppState
from gate.web.session import with_security_headers

PREFIX = "/v1/requests/"
SUFFIX = "/wait"
#: longer `timeout` texts go to FastAPI (its validation answers them)
MAX_TIMEOUT_TEXT = 16
_JSON = (b"content-type", b"application/json")


class LongPoll:
    """Answers plain long-polls of one app without its middleware stack (module docstring)."""

    def __init__(self, app: FastAPI, state: AppState) -> None:
        self.app = app
        self.service = state.service
        self.tokens = state.tokens
        self.guard = SameOriginGuard(app, state.settings)
        #: long-polls answered here rather than by the FastAPI route (tests read it)
        self.answered = 0

    def lean(self, scope: Scope, send: Send) -> Coroutine[Any, Any, None] | None:
        """The coroutine that answers this request here, or None to hand it to the stack."""
        if scope["type"] != "http" or scope["method"] != "GET" or scope.get("root_path"):
            return None
        path: str = scope["path"]
        if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
            return None
        request_id = path[len(PREFIX) : -len(SUFFIX)]
        if not request_id or "/" in request_id:
            return None
        if not nothing_to_limit(scope) or self.guard.refusal(scope) is not None:
            return None
        timeout = plain_timeout(scope["query_string"])
        if timeout is None:
            return None
        return self._answer(scope, send, request_id, timeout)

    async def _answer(self, scope: Scope, send: Send, request_id: str, timeout: float) -> None:
        self.answered += 1
        rid = request_id_of(scope)
        try:
            principal = self.tokens.authenticate(_authorization(scope))
            cap = self.service.settings.server.max_wait_seconds
            body = await waiting.wait(self.service, request_id, principal, min(timeout, cap))
        except Exception as exc:  # rendered by the app's handlers, as through the stack
            await self._refuse(scope, send, rid, exc)
            return
        head = [(b"content-length", b"%d" % len(body)), _JSON]
        await send({"type": "http.response.start", "status": 200, "headers": _decorated(head, rid)})
        await send({"type": "http.response.body", "body": body})

    async def _refuse(self, scope: Scope, send: Send, rid: str, exc: Exception) -> None:
        """Answer `exc` with the handler the app registered for it (the one error shape)."""
        scope["app"] = self.app
        scope.setdefault("state", {})["request_id"] = rid
        token = request_id_var.set(rid)  # the 500 handler logs it
        try:
            handler = _handler_for(self.app, exc)
            response = handler(Request(scope), exc)
            if inspect.isawaitable(response):
                response = await response
        finally:
            request_id_var.reset(token)
        assert isinstance(response, Response)

        async def send_decorated(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = _decorated(list(message.get("headers", [])), rid)
            await send(message)

        await response(scope, _no_body, send_decorated)


def _mark_coroutine_function(function: Any) -> None:
    """Make `function` look like an `async def` to `asyncio`/`inspect.iscoroutinefunction`.

    uvicorn tells an ASGI 3 app (an `async def __call__`) from an ASGI 2 one that way.
    """
    if hasattr(inspect, "markcoroutinefunction"):  # Python 3.12+
        inspect.markcoroutinefunction(function)
    else:  # 3.11: the marker asyncio.iscoroutinefunction reads
        function._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]


class GateAPI(FastAPI):
    """FastAPI, with plain long-polls answered by `LongPoll` before the middleware stack."""

    long_poll: LongPoll | None = None

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        # Not `async`: the coroutine that answers is handed to uvicorn as it is, so a parked
        # waiter holds one coroutine frame fewer (marked below as a coroutine function, so
        # servers still see an ASGI 3 app).
        long_poll = self.long_poll
        if long_poll is not None:
            lean = long_poll.lean(scope, send)
            if lean is not None:
                return lean
        return super().__call__(scope, receive, send)


_mark_coroutine_function(GateAPI.__call__)


def install(app: GateAPI, state: AppState) -> None:
    """Answer `app`'s plain long-polls ahead of its middleware."""
    app.long_poll = LongPoll(app, state)


def plain_timeout(query: bytes) -> float | None:
    """The `timeout` query as seconds when it is a plain decimal in range, else None.

    Parsed as Starlette parses a query string; a repeated, empty, signed, exponent or
    out-of-range value returns None, and FastAPI's validation answers it (its 422 shape).
    """
    values = [
        v for k, v in parse_qsl(query.decode("latin-1"), keep_blank_values=True) if k == "timeout"
    ]
    if not values:
        return WAIT_TIMEOUT_DEFAULT
    if len(values) > 1 or len(values[0]) > MAX_TIMEOUT_TEXT:
        return None
    whole, dot, fraction = values[0].partition(".")
    if not _digits(whole) or (dot and not _digits(fraction)):
        return None
    seconds = float(values[0])
    return seconds if seconds <= WAIT_TIMEOUT_MAX else None


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _authorization(scope: Scope) -> str | None:
    # As Starlette's `request.headers.get`: the first one, latin-1.
    for name, value in scope["headers"]:
        if name == b"authorization":
            text: str = value.decode("latin-1")
            return text
    return None


def _decorated(headers: list[tuple[bytes, bytes]], rid: str) -> list[tuple[bytes, bytes]]:
    """`headers` plus what the stack adds: the request id, then the security headers."""
    headers.append((b"x-request-id", rid.encode("latin-1")))
    return with_security_headers(headers)


def _handler_for(app: FastAPI, exc: Exception) -> Any:
    handlers = app.exception_handlers
    for cls in type(exc).__mro__:
        if cls in handlers:
            return handlers[cls]
    raise exc  # no handler at all (install_error_handlers registers one for Exception)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}
