"""Request ids, input limits (body size, JSON shape, URLs), and the one error handler that shapes
every failure."""

from __future__ import annotations

import json
import logging
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gate.base.errors import GateError, PayloadTooLarge, TooManyWaiters, error_body
from gate.base.logs import request_id_var
from gate.inputs.bodies import JsonLimits, json_limits
from gate.server.access import AccessLog, request_id_of

log = logging.getLogger("gate.api")

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
}


class RequestEnvelope:
    """What every HTTP request goes through first, with one wrapper around `send`.

    * **an id**: from `X-Request-ID` (printable, cut to 64) or new, for logs and echoed in
      the response;
    * **headers every response carries** (`headers`: the console's CSP and anti-framing
      headers), each unless the response set it itself;
    * **limits, before the app reads anything**: bodies over `max_bytes` get 413 (by
      Content-Length or while streaming); a URL carrying a NUL character gets 400
      (PostgreSQL cannot compare text with one, so an id or filter holding it would fail
      inside the database); `json_limits` bound the JSON values the request schemas
      accept, for the rest of this request.

    One middleware, not three: each layer's `send` wrapper costs every response a call
    per message, and this is the path every tool call takes.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        json_limits: JsonLimits | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.json_limits = json_limits or JsonLimits()
        self.headers = list(headers or [])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id_of(scope)
        rid_token = request_id_var.set(rid)
        limits_token = json_limits.set(self.json_limits)
        # Kept on the scope too: the outermost 500 handler runs after this context is reset.
        scope.setdefault("state", {})["request_id"] = rid
        try:
            await self._limited(scope, receive, send, rid.encode("latin-1"))
        finally:
            json_limits.reset(limits_token)
            request_id_var.reset(rid_token)

    async def _limited(self, scope: Scope, receive: Receive, send: Send, rid: bytes) -> None:
        refusal = limit_refusal(scope, self.max_bytes)
        if refusal is not None:
            await send_error(send, *refusal)
            return
        seen = 0
        started = refused = False
        extra = [(b"x-request-id", rid), *self.headers]

        async def limited_receive() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes and not refused:
                    refused = True
                    if not started:
                        await send_error(send, 413, *_too_large(self.max_bytes))
                    # The app sees a client that went away; whatever it answers is dropped.
                    return {"type": "http.disconnect"}
            return message

        async def send_once(message: Message) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in extra if h[0] not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, limited_receive, send_once)


def nothing_to_limit(scope: Scope) -> bool:
    """True when `RequestEnvelope` could refuse nothing: no body and no NUL in the URL.

    What answers ahead of the middleware (the long-poll) serves only such requests and
    hands any other to the stack.
    """
    headers = dict(scope["headers"])
    length = headers.get(b"content-length")
    no_body = (length is None or length == b"0") and b"transfer-encoding" not in headers
    return no_body and not _has_nul(scope)


def limit_refusal(scope: Scope, max_bytes: int) -> tuple[int, str, str] | None:
    """The error for a request refused before the app sees it, or None.

    (status, code, message): a NUL in the URL, a Content-Length that is not a number or is
    over `max_bytes`. What answers ahead of the middleware hands any such request to it.
    """
    if _has_nul(scope):
        return 400, "bad_request", "the URL contains a NUL character"
    length = dict(scope["headers"]).get(b"content-length")
    if length is None:
        return None
    try:
        too_big = int(length) > max_bytes
    except ValueError:
        return 400, "bad_request", "Content-Length is not a number"
    return (413, *_too_large(max_bytes)) if too_big else None


def _has_nul(scope: Scope) -> bool:
    query: bytes = scope.get("query_string", b"")
    return "\x00" in scope.get("path", "") or b"\x00" in query or b"%00" in query


def _too_large(limit: int) -> tuple[str, str]:
    return "payload_too_large", f"request body is larger than the limit of {limit} bytes"


async def send_error(send: Send, status: int, code: str, message: str) -> None:
    """Answer at the ASGI level (before any route) with the one error body."""
    body = json.dumps(error_body(code, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-request-id", request_id_var.get().encode("latin-1")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure through the one error body."""
    app.exception_handler(GateError)(_gate_error)
    app.exception_handler(RequestValidationError)(_validation)
    app.exception_handler(sa.exc.DataError)(_unstorable)
    app.exception_handler(sa.exc.OperationalError)(_database_unavailable)
    app.exception_handler(sa.exc.InterfaceError)(_database_unavailable)
    app.exception_handler(StarletteHTTPException)(_http)
    app.exception_handler(Exception)(_unexpected)


async def _gate_error(request: Request, exc: GateError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if exc.status in (401, 403):
        # A refused credential leaves a trace whatever the access log's level: what was
        # refused and why, from where (never the token: the message does not carry it).
        client = request.client.host if request.client else "-"
        log.warning(
            "refused %s %s from %s: %d %s: %s",
            request.method,
            request.url.path,
            client,
            exc.status,
            exc.code,
            exc.message,
        )
    if isinstance(exc, TooManyWaiters):
        # The refused waiter comes back later on a new connection: this one is freed now.
        headers = {"Retry-After": str(exc.retry_after), "Connection": "close"}
    return ErrorResponse(exc.body(), status_code=exc.status, headers=headers)


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        detail = next(e for e in errors if e.get("type") == "json_invalid")
        where = detail.get("ctx", {}).get("error", "")
        return ErrorResponse(
            error_body("malformed_json", f"the body is not valid JSON: {where}".rstrip(": ")),
            status_code=400,
        )
    problems = [_problem(e) for e in errors]
    message = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    return ErrorResponse(error_body("invalid_input", message, problems=problems), status_code=422)


async def _unstorable(request: Request, exc: sa.exc.DataError) -> JSONResponse:
    # SQLSTATE class 22, "data exception": the database refused a value this request
    # brought (PostgreSQL: a NUL character in text, say). The request schemas refuse
    # what they know of up front; this is the net for input that reached the database
    # some other way (a form, a chat callback), so it is still the client's 422.
    reason = str(exc.orig or exc).strip().splitlines()[0][:200]
    log.warning("database refused a value in %s %s: %s", request.method, request.url.path, reason)
    message = f"the database cannot store a value in this request: {reason}"
    return ErrorResponse(error_body("invalid_input", message), status_code=422)


async def _database_unavailable(request: Request, exc: sa.exc.DBAPIError) -> JSONResponse:
    # The connection was lost (a database restart, a failover, a proxy's idle timeout: the
    # pool does not ping before each use, so the first call after one meets it) or the
    # database is busy. SQLAlchemy has already dropped the dead connections, so asking again
    # is the fix: a 503 with Retry-After, which every client treats as "not decided".
    reason = str(exc.orig or exc).strip().splitlines()[0][:200] if str(exc.orig or exc) else ""
    log.warning("database unavailable in %s %s: %s", request.method, request.url.path, reason)
    return ErrorResponse(
        error_body("unavailable", "the database did not answer; try again in a moment"),
        status_code=503,
        headers={"Retry-After": "1"},
    )


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    unparsable = _unparsable_body(request, exc)
    if unparsable is not None:
        return ErrorResponse(error_body("malformed_json", unparsable), status_code=400)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    if exc.status_code == 404 and message == "Not Found":
        message = f"no route for {request.method} {request.url.path}"
    if exc.status_code == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
    return ErrorResponse(
        error_body(code, message),
        status_code=exc.status_code,
        headers=getattr(exc, "headers", None),
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    rid = getattr(request.state, "request_id", None) or request_id_var.get()
    log.exception("unhandled error in %s %s (request id %s)", request.method, request.url.path, rid)
    return ErrorResponse(
        error_body(
            "internal_error",
            "gate hit an unexpected error; the log has details",
            request_id=rid,
        ),
        status_code=500,
    )


class ErrorResponse(JSONResponse):
    """The error body as JSON, writable whatever text it quotes back.

    Messages can carry what the client sent (an unknown key, an id); if that holds a lone
    surrogate, UTF-8 cannot encode it, so the body falls back to \\u escapes (still valid
    JSON) instead of failing while reporting the error.
    """

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, separators=(",", ":")).encode("ascii")


def _unparsable_body(request: Request, exc: StarletteHTTPException) -> str | None:
    """What was wrong with a JSON body FastAPI's parser gave up on (None: something else).

    FastAPI turns any parser failure that is not a JSONDecodeError into a bare 400 "There
    was an error parsing the body"; its cause says which.
    """
    cause = exc.__cause__
    kind = request.headers.get("content-type", "json")
    if exc.status_code != 400 or cause is None or "json" not in kind.lower():
        return None
    if isinstance(cause, RecursionError):  # Python's parser recurses once per level
        return "the body is not valid JSON: it is nested too deeply to read"
    if isinstance(cause, UnicodeDecodeError):
        return "the body is not valid JSON: it is not UTF-8 text"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "the body is not valid JSON: it holds a number too long to read"
    if isinstance(cause, ValueError):
        return "the body is not valid JSON"
    return None


def _problem(error: Any) -> dict[str, str]:
    loc = [str(p) for p in error.get("loc", ()) if p not in ("body", "query", "path")]
    field = ".".join(loc) or "body"
    ctx = error.get("ctx") or {}
    if error.get("type") == "unstorable_value" and ctx.get("at"):
        # The path inside a stored JSON value, e.g. tool_args.rows[3].name.
        field = field + str(ctx["at"]) if loc else str(ctx["at"]).lstrip(".")
    return {"field": field, "message": str(error.get("msg", "invalid"))}


__all__ = [
    "AccessLog",
    "PayloadTooLarge",
    "RequestEnvelope",
    "install_error_handlers",
    "limit_refusal",
    "nothing_to_limit",
    "request_id_of",
    "request_id_var",
]
