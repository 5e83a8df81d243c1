"""The access log: one line per HTTP request, written around the whole app."""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from ulid import ULID

from gate.base import tracing
from gate.base.logs import AccessNote, access_note

#: one line per HTTP request answered (INFO); set its level to WARNING to turn it off
access_log = logging.getLogger("gate.access")


class AccessLog:
    """One log line per HTTP request, when its answer starts: method, path, status, duration,
    request id, and who called (a token's name or the signed-in approver).

    It wraps the whole app, the hot routes answered ahead of the middleware too, and costs a
    request one record and a wrapper of `send`; none of it when `gate.access` is filtered out.
    Not `async`: the app's coroutine is handed to the server as it is, so a parked long-poll
    holds no frame of this. Never the query string (a link may carry a secret) nor a header.

    With tracing on (`gate.base.tracing`) it also wraps each request in its SERVER span: the
    one place both the hot routes (`gate.api.lean`) and FastAPI's pass.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Any:
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        if tracing.tracer is not None:
            return self._traced(scope, receive, send)
        if not access_log.isEnabledFor(logging.INFO):
            return self.app(scope, receive, send)
        return self.app(scope, receive, self._logging(scope, send))

    def _logging(self, scope: Scope, send: Send) -> Send:
        """`send`, logging the request's line when its answer starts."""
        note = AccessNote()
        # Each request runs in its own task, with its own context: set, never reset.
        access_note.set(note)
        started = time.perf_counter()

        async def logged_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                _log_access(scope, message, started, note)
            await send(message)

        return logged_send

    async def _traced(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The request inside its SERVER span (a coroutine frame more: only when tracing)."""
        span = tracing.server_span(scope, f"{scope['method']} {route_template(scope['path'])}")
        answered: list[int] = []

        async def traced_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                answered.append(message["status"])
            await send(message)

        logged = access_log.isEnabledFor(logging.INFO)
        try:
            await self.app(
                scope, receive, self._logging(scope, traced_send) if logged else traced_send
            )
        finally:
            route = getattr(scope.get("route"), "path", None)  # FastAPI's, when it routed it
            if isinstance(route, str):
                span.update_name(f"{scope['method']} {route}")
                span.set_attribute("http.route", route)
            tracing.end_server_span(span, answered[0] if answered else None)


def _log_access(scope: Scope, message: Message, started: float, note: AccessNote) -> None:
    ms = round((time.perf_counter() - started) * 1000, 1)
    status: int = message["status"]
    rid = "-"
    for name, value in message.get("headers", ()):
        if name == b"x-request-id":
            rid = value.decode("latin-1")
            break
    path: str = scope["path"]
    if len(path) > 200 or not path.isprintable():  # the client chose it: one line, bounded
        path = repr(path[:200])
    who = note.principal or "-"
    access_log.info(
        "%s %s %d %.1f ms by %s",
        scope["method"],
        path,
        status,
        ms,
        who,
        extra={
            "request_id": rid,
            "fields": {
                "method": scope["method"],
                "path": path,
                "status": status,
                "duration_ms": ms,
                "principal": note.principal,
            },
        },
    )


def route_template(path: str) -> str:
    """`path` with its ids as placeholders, a span's name (bounded: ids are per request)."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if i >= 1 and parts[i - 1] == "requests" and part:
            parts[i] = "{request_id}"
        elif len(part) == 26 and part.isalnum():  # a ULID: a grant's, a session's...
            parts[i] = "{id}"
    return tracing.cut("/".join(parts))


def request_id_of(scope: Scope) -> str:
    """The request's id: its printable `X-Request-ID` (cut to 64 characters), or a new ULID."""
    incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
    return incoming[:64] if incoming.isprintable() and incoming else str(ULID())
