"""The hot routes, answered ahead of the middleware stack: the gate call, the decision, the wait.

`POST /v1/gate` runs on every tool call an agent makes, `POST /v1/requests/{id}/decision` on
every decision, and `GET /v1/requests/{id}/wait` holds thousands of connections open at
once. Through FastAPI each paid its routing, a dozen middleware and exception wrappers (a
coroutine frame each, kept for as long as a long-poll is parked), the dependency solver and
a Starlette `Request`: about a third of an ask's server CPU. `GateAPI` answers plain requests
of these routes with `LeanRoutes` straight from the ASGI scope instead (`ROUTES` is the
table), running the same checks through the same functions:

* the same-origin guard (`SameOriginGuard.refusal`: the Host check in local mode, and proof
  of origin for a write),
* the body and URL limits (`limit_refusal` and `nothing_to_limit` before reading; the body
  read here is counted against the `RequestEnvelope`'s own `max_bytes`), with the
  envelope's `json_limits` while the body is validated and answered,
* the bearer token (`TokenBook.authenticate`) and the route's role checks, which live in
  the shared answer functions (`v1.gate_answer`, `v1.decision_answer`; `waiting.wait`),
* `X-Request-ID` (`request_id_of`) and the console's security headers on every answer.

A request it does not serve plainly goes to the full stack, which answers it exactly as
before (the same 400, 413, 421 or 422, byte for byte): a guard refusal, a NUL, HEAD, a root
path, an unusual `timeout`, a body on the long-poll; for the two POSTs a content type other
than `application/json`, a Content-Length over the limit, and any body that is not plainly
valid (not JSON, not the schema, over the limit while streaming, a client gone mid-body).
The messages already read from `receive` are replayed to the stack, so it reads the same
body. Errors met after that (401, 403, 404, 409, a database failure) are rendered by the
app's registered exception handlers, so their bodies are the one error shape.

The FastAPI routes stay declared: they document the routes (OpenAPI) and answer what is
handed over, through the same answer functions, so the bytes cannot drift apart.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gate.api import framing, v1, waiting
from gate.api.guard import SameOriginGuard
from gate.api.headers import with_security_headers
from gate.api.middleware import RequestEnvelope, limit_refusal, nothing_to_limit, request_id_var
from gate.api.v1 import WAIT_TIMEOUT_DEFAULT, WAIT_TIMEOUT_MAX
from gate.base import threads
from gate.base.errors import TooManyWaiters
from gate.identity.auth import Principal
from gate.inputs.bodies import DecisionBody, GateCall, JsonLimits, json_limits
from gate.server.access import request_id_of
from gate.server.capacity import Capacity, open_file_limit
from gate.server.state import AppState

REQUESTS = "/v1/requests/"
WAIT = REQUESTS + "{request_id}/wait"
#: (method, path as FastAPI declares it) -> the name of the `LeanRoutes` method that serves it
ROUTES = {
    ("POST", "/v1/gate"): "gate",
    ("POST", REQUESTS + "{request_id}/decision"): "decision",
    ("GET", WAIT): "wait",
}
#: longer `timeout` texts go to FastAPI (its validation answers them)
MAX_TIMEOUT_TEXT = 16
_JSON = (b"content-type", b"application/json")

#: what serving a route returns: the coroutine that answers, or None to hand it to the stack
Lean = Coroutine[Any, Any, None] | None
#: a validated body and its caller -> the 200 answer's bytes (raises what the route raises)
Answer = Callable[[Any, Principal, str | None], Awaitable[bytes]]


class LeanRoutes:
    """Answers plain requests of `ROUTES` without the app's middleware (module docstring)."""

    def __init__(self, app: FastAPI, state: AppState) -> None:
        self.app = app
        self.service = state.service
        self.tokens = state.tokens
        self.guard = SameOriginGuard(app, state.settings)
        envelope = _envelope_options(app)
        #: the envelope's own limits, so a body is refused here exactly where it is there
        self.max_bytes: int = envelope["max_bytes"]
        self.json_limits: JsonLimits = envelope.get("json_limits") or JsonLimits()
        #: requests answered here, by route name (tests read them)
        self.answered: Counter[str] = Counter()
        #: requests whose body was read here and then handed to the stack, by route name
        self.handed_over: Counter[str] = Counter()
        #: how many long-polls may park, and how many do (`gate.server.serve` sizes it at start)
        self.capacity = Capacity.of(state.settings, open_file_limit())
        self._serve: dict[tuple[str, str], Callable[[Scope, Receive, Send, str | None], Lean]]
        self._serve = {key: getattr(self, name) for key, name in ROUTES.items()}
        _check_declared()

    def lean(self, scope: Scope, receive: Receive, send: Send) -> Lean:
        """The coroutine that answers this request here, or None to hand it to the stack."""
        if scope["type"] != "http" or scope.get("root_path"):
            return None
        template, request_id = _template(scope["path"])
        serve = self._serve.get((scope["method"], template))
        if (serve is None and template != WAIT) or self.guard.refusal(scope) is not None:
            return None
        lean = serve(scope, receive, send, request_id) if serve is not None else None
        if lean is None and template == WAIT:
            # A long-poll the stack answers (HEAD, an unusual query) parks there: it holds
            # a place all the same.
            return self._held(scope, receive, send)
        return lean

    # -- the routes ---------------------------------------------------------------------------

    def gate(self, scope: Scope, receive: Receive, send: Send, _: str | None) -> Lean:
        """`POST /v1/gate`: `v1.gate_answer` (policy on the event loop, an ask in a thread)."""
        if not self._plain_json_post(scope):
            return None
        return self._post("gate", scope, receive, send, None, GateCall, self._gate_answer)

    def decision(self, scope: Scope, receive: Receive, send: Send, request_id: str | None) -> Lean:
        """`POST /v1/requests/{id}/decision`: `v1.decision_answer`, in a worker thread."""
        if not self._plain_json_post(scope):
            return None
        return self._post(
            "decision", scope, receive, send, request_id, DecisionBody, self._decision_answer
        )

    def wait(self, scope: Scope, receive: Receive, send: Send, request_id: str | None) -> Lean:
        """`GET /v1/requests/{id}/wait`: the long-poll, a future and a timer while parked."""
        if not nothing_to_limit(scope):
            return None
        timeout = plain_timeout(scope["query_string"])
        if timeout is None or request_id is None:
            return None
        return self._wait(scope, send, request_id, timeout)

    async def _gate_answer(self, call: GateCall, principal: Principal, _: str | None) -> bytes:
        return await v1.gate_answer(self.service, call, principal)

    async def _decision_answer(
        self, body: DecisionBody, principal: Principal, request_id: str | None
    ) -> bytes:
        assert request_id is not None
        # In a worker thread, as FastAPI runs the plain `def` route (it reads and writes).
        return await threads.run_sync(v1.decision_answer, self.service, request_id, body, principal)

    # -- the two POSTs ------------------------------------------------------------------------

    def _plain_json_post(self, scope: Scope) -> bool:
        """True when the envelope would read this body and FastAPI would parse it as JSON."""
        if limit_refusal(scope, self.max_bytes) is not None:
            return False
        return _media_type(scope) == "application/json"

    async def _post(
        self,
        route: str,
        scope: Scope,
        receive: Receive,
        send: Send,
        request_id: str | None,
        model: type[BaseModel],
        answer: Answer,
    ) -> None:
        read, body = await self._read_body(receive)
        limits = json_limits.set(self.json_limits)  # as the envelope sets for the request
        try:
            try:
                valid = model.model_validate_json(body) if body is not None else None
            except ValidationError:
                valid = None
            if valid is None:
                # FastAPI's parser and validation answer it (400, 413, 422), reading the
                # same messages.
                self.handed_over[route] += 1
                await FastAPI.__call__(self.app, scope, _replaying(read, receive), send)
                return
            self.answered[route] += 1
            rid = request_id_of(scope)
            rid_token = request_id_var.set(rid)  # log lines carry it, as in the stack
            try:
                principal = self.tokens.authenticate(_authorization(scope))
                payload = await answer(valid, principal, request_id)
            except Exception as exc:  # rendered by the app's handlers, as through the stack
                await self._refuse(scope, send, rid, exc)
                return
            finally:
                request_id_var.reset(rid_token)
            await _send_json(send, payload, rid)
        finally:
            json_limits.reset(limits)

    async def _read_body(self, receive: Receive) -> tuple[list[Message], bytes | None]:
        """The messages read, and the whole body (None: over the limit, or the client left).

        Counted as `RequestEnvelope` counts, message by message; reading stops at the
        message that passes `max_bytes`, where the envelope (reading the replay) refuses.
        """
        read: list[Message] = []
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                return read, None
            chunk: bytes = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                return read, None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return read, b"".join(chunks)

    # -- the long-poll ------------------------------------------------------------------------

    async def _wait(self, scope: Scope, send: Send, request_id: str, timeout: float) -> None:
        self.answered["wait"] += 1
        rid = request_id_of(scope)
        try:
            principal = self.tokens.authenticate(_authorization(scope))
            self.capacity.hold()  # a 503 with Retry-After when waiting holds all it may
        except Exception as exc:  # rendered by the app's handlers, as through the stack
            await self._refuse(scope, send, rid, exc)
            return
        try:
            # held up to `timeout`, ended sooner at the server's cap (`waiting.slice_seconds`)
            body = await waiting.wait(self.service, request_id, principal, timeout)
        except Exception as exc:
            await self._refuse(scope, send, rid, exc)
            return
        finally:
            self.capacity.release()
        await _send_json(send, body, rid)

    async def _held(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The stack's answer to a long-poll, holding a place while it runs."""
        try:
            self.capacity.hold()
        except TooManyWaiters as exc:
            await self._refuse(scope, send, request_id_of(scope), exc)
            return
        try:
            await FastAPI.__call__(self.app, scope, receive, send)
        finally:
            self.capacity.release()

    # -- errors -------------------------------------------------------------------------------

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
    """FastAPI, with plain requests of the hot routes answered by `LeanRoutes` first."""

    lean_routes: LeanRoutes | None = None

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        # Not `async`: the coroutine that answers is handed to uvicorn as it is, so a parked
        # waiter holds one coroutine frame fewer (marked below as a coroutine function, so
        # servers still see an ASGI 3 app).
        if scope["type"] == "http" and framing.carries_body(scope):
            # An answer that beats the body closes the connection (gate.api.framing).
            receive, send = framing.framed(receive, send)
        lean_routes = self.lean_routes
        if lean_routes is not None:
            lean = lean_routes.lean(scope, receive, send)
            if lean is not None:
                return lean
        return super().__call__(scope, receive, send)

    def include_router(self, router: APIRouter, **options: Any) -> None:
        """Serve `router`'s routes on this app as the router built them.

        FastAPI (0.165) wraps an included router and, on the first request that passes it,
        analyses each of its routes a second time, in every app (measured: 50 ms of CPU over
        an app's first requests, `bench/app_start.py`), and every later request walks the
        wrappers. gate includes its routers with nothing that analysis adds: no prefix, tags,
        dependencies or responses of the include's own, no startup handlers, and no
        `dependency_overrides`. An include with any of those takes FastAPI's way.
        """
        if options or router.on_startup or router.on_shutdown:
            super().include_router(router, **options)
            return
        self.router.routes.extend(router.routes)


_mark_coroutine_function(GateAPI.__call__)


def install(app: GateAPI, state: AppState) -> None:
    """Answer `app`'s plain requests of the hot routes ahead of its middleware."""
    app.lean_routes = LeanRoutes(app, state)


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


def _template(path: str) -> tuple[str, str | None]:
    """`path` as the route template it would match in `ROUTES`, and its request id.

    An id is what Starlette's `{request_id}` matches: one non-empty segment.
    """
    if not path.startswith(REQUESTS):
        return path, None
    request_id, slash, action = path[len(REQUESTS) :].partition("/")
    if not request_id or not slash or "/" in action:
        return "", None
    return REQUESTS + "{request_id}/" + action, request_id


def _check_declared() -> None:
    """Each route served here is declared in the v1 router too (it answers what is handed
    over, and documents the route)."""
    declared = {
        (method, route.path)
        for route in v1.router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    }
    missing = set(ROUTES) - declared
    if missing:
        raise RuntimeError(f"lean routes without a FastAPI route to hand over to: {missing}")


def _envelope_options(app: FastAPI) -> dict[str, Any]:
    """The options `app`'s `RequestEnvelope` was added with (its body and JSON limits)."""
    for middleware in app.user_middleware:
        if middleware.cls is RequestEnvelope:  # type: ignore[comparison-overlap]
            return dict(middleware.kwargs)
    raise RuntimeError("the app has no RequestEnvelope: nothing to take its limits from")


def _replaying(read: list[Message], receive: Receive) -> Receive:
    """`receive`, giving back the messages already `read` first."""
    pending = iter(read)

    async def replayed() -> Message:
        message = next(pending, None)
        return message if message is not None else await receive()

    return replayed


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _authorization(scope: Scope) -> str | None:
    # As Starlette's `request.headers.get`: the first one, latin-1.
    for name, value in scope["headers"]:
        if name == b"authorization":
            text: str = value.decode("latin-1")
            return text
    return None


def _media_type(scope: Scope) -> str | None:
    """The first Content-Type's media type, lower case (as FastAPI and the guard read it)."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            text: str = value.decode("latin-1")
            return text.split(";", 1)[0].strip().lower()
    return None


async def _send_json(send: Send, body: bytes, rid: str) -> None:
    head = [(b"content-length", b"%d" % len(body)), _JSON]
    await send({"type": "http.response.start", "status": 200, "headers": _decorated(head, rid)})
    await send({"type": "http.response.body", "body": body})


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
