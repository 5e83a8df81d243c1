"""Python SDK for gate: `GateClient` (sync and async, httpx), `PreToolUseHook`, `@require_approval`.

The waiting (submit, long-poll in slices, reconnect, withdraw at the deadline) and the words
the model reads are `gate.protocol.decide()`, the same flow `gate hook` runs; this module only
drives it over httpx.

    client = GateClient("http://127.0.0.1:8000", token="...")
    verdict = client.check("pay_vendor", {"amount": 60000})      # blocks until decided
    if not verdict.allowed:
        return verdict.reason                                     # tell the model why
    args = verdict.updated_args or {"amount": 60000}              # an approver may edit
    ...run the call with args...
    client.record_outcome(verdict, "ran", "paid, txn 881")        # the audit trail's last line

A yes is only returned when the approval is bound to exactly the call that will run (see
`gate.binding`); otherwise the verdict's kind is "mismatch" and `.allowed` is False.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import httpx

from gate.protocol import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    GATE_DOWN,
    WAIT_SLICE,
    Abandoned,
    Call,
    Exchange,
    Flow,
    Pause,
    Reply,
    Verdict,
    decide,
    drive,
    summarise,
)

#: the outcomes `record_outcome` accepts
Outcome = Literal["ran", "failed", "not_run"]

__all__ = [
    "ApprovalDenied",
    "GateAPIError",
    "GateClient",
    "HookContext",
    "HookResult",
    "PreToolUseHook",
    "Verdict",
    "require_approval",
]

F = TypeVar("F", bound=Callable[..., Any])
TOKEN_HINT = (
    "pass GateClient(token=...) or set GATE_TOKEN to an agent token from gate.toml [[tokens]] "
    '(role = "agent")'
)


class GateAPIError(Exception):
    """The server answered a raw API call with an error body (`{"error": {code, message}}`)."""

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message, self.body = status, code, message, body


class ApprovalDenied(Exception):
    """The call was not approved; `reason` is written for the model, `request` is the request."""

    def __init__(
        self, reason: str, request: dict[str, Any] | None = None, *, verdict: Verdict | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request = request
        self.verdict = verdict

    @property
    def kind(self) -> str | None:
        """Why: rejected, expired, cancelled, denied, deadline, unreachable, ..."""
        return self.verdict.kind if self.verdict else None


class GateClient:
    """A client for the gate API, with blocking and `*_async` methods.

    Args:
        url: the gate server (default: $GATE_URL, else http://127.0.0.1:8000).
        token: an agent token (default: $GATE_TOKEN; a loopback server without tokens needs none).
        agent_id: sent with every call unless a call names its own.
        user_id: the person the agent acts for, sent with every call unless overridden.
        timeout: seconds `check()` waits for a decision before withdrawing and denying.
        wait_slice: seconds per long-poll.
        transport, async_transport: httpx transports (tests, proxies, retries).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        wait_slice: float = WAIT_SLICE,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = (url or os.environ.get("GATE_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("GATE_TOKEN") or None
        self.agent_id = agent_id
        self.user_id = user_id
        self.timeout = timeout
        self.wait_slice = wait_slice
        self._transport = transport
        self._async_transport = async_transport
        self._sync: httpx.Client | None = None
        # one agent may check calls from several threads: make one pool, not one per thread
        self._sync_lock = threading.Lock()
        self._async: httpx.AsyncClient | None = None

    # -- plumbing ------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        # JSON even on a body-less POST (cancel): gate refuses token-less writes that a page on
        # another site could send, and a page cannot send this type without a CORS preflight.
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    @property
    def http(self) -> httpx.Client:
        """The underlying httpx.Client (created on first use)."""
        if self._sync is None:
            with self._sync_lock:
                if self._sync is None:
                    self._sync = httpx.Client(
                        base_url=self.url,
                        headers=self._headers(),
                        transport=self._transport,
                        timeout=30,
                    )
        return self._sync

    @property
    def ahttp(self) -> httpx.AsyncClient:
        """The underlying httpx.AsyncClient (created on first use)."""
        if self._async is None:
            self._async = httpx.AsyncClient(
                base_url=self.url,
                headers=self._headers(),
                transport=self._async_transport,
                timeout=30,
            )
        return self._async

    def close(self) -> None:
        """Close the sync connection pool."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def aclose(self) -> None:
        """Close both connection pools."""
        self.close()
        if self._async is not None:
            await self._async.aclose()
            self._async = None

    def __enter__(self) -> GateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> GateClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _send(self, exchange: Exchange) -> Reply:
        try:
            response = self.http.request(
                exchange.method, exchange.path, json=exchange.body, timeout=exchange.timeout
            )
        except httpx.TransportError as exc:
            return Reply(0, problem=_describe(exc, exchange.timeout))
        return _reply(response)

    async def _send_async(self, exchange: Exchange) -> Reply:
        try:
            response = await self.ahttp.request(
                exchange.method, exchange.path, json=exchange.body, timeout=exchange.timeout
            )
        except httpx.TransportError as exc:
            return Reply(0, problem=_describe(exc, exchange.timeout))
        return _reply(response)

    # -- raw API -------------------------------------------------------------------------------

    def submit(self, tool_name: str, tool_args: dict[str, Any] | None = None, **fields: Any) -> Any:
        """`POST /v1/gate` once: the policy answer (and the pending request for `ask`)."""
        return _unwrap(self._send(self._submit(tool_name, tool_args, fields)))

    async def submit_async(
        self, tool_name: str, tool_args: dict[str, Any] | None = None, **fields: Any
    ) -> Any:
        """`POST /v1/gate` once (async)."""
        return _unwrap(await self._send_async(self._submit(tool_name, tool_args, fields)))

    def _submit(
        self, tool_name: str, tool_args: dict[str, Any] | None, fields: dict[str, Any]
    ) -> Exchange:
        body = {"tool_name": tool_name, "tool_args": tool_args or {}, **fields}
        body.setdefault("agent_id", self.agent_id)
        body.setdefault("user_id", self.user_id)
        body = {k: v for k, v in body.items() if v is not None}
        return Exchange("POST", "/v1/gate", body, 30)

    def get(self, request_id: str) -> Any:
        """`GET /v1/requests/{id}`."""
        return _unwrap(self._send(Exchange("GET", f"/v1/requests/{request_id}", None, 30)))

    async def get_async(self, request_id: str) -> Any:
        """`GET /v1/requests/{id}` (async)."""
        return _unwrap(
            await self._send_async(Exchange("GET", f"/v1/requests/{request_id}", None, 30))
        )

    def wait(self, request_id: str, timeout: float = WAIT_SLICE) -> Any:
        """One long-poll: the request once final, or still pending after `timeout`."""
        return _unwrap(self._send(_wait(request_id, timeout)))

    async def wait_async(self, request_id: str, timeout: float = WAIT_SLICE) -> Any:
        """One long-poll (async)."""
        return _unwrap(await self._send_async(_wait(request_id, timeout)))

    def cancel(self, request_id: str, reason: str | None = None) -> Any:
        """Withdraw a pending request."""
        return _unwrap(self._send(_cancel(request_id, reason)))

    async def cancel_async(self, request_id: str, reason: str | None = None) -> Any:
        """Withdraw a pending request (async)."""
        return _unwrap(await self._send_async(_cancel(request_id, reason)))

    def decide(
        self,
        request_id: str,
        verdict: Literal["approve", "reject"],
        comment: str | None = None,
        **extras: Any,
    ) -> Any:
        """Approve or reject (needs an approver token).

        Args:
            request_id: the request.
            verdict: "approve" or "reject".
            comment: free text for the agent's model.
            **extras: edited_args (approve with this full argument object instead), reasons
                (preset reject reasons of the rule), grant ({"scope", "duration"}).
        """
        return _unwrap(self._send(_decision(request_id, verdict, comment, extras)))

    async def decide_async(
        self,
        request_id: str,
        verdict: Literal["approve", "reject"],
        comment: str | None = None,
        **extras: Any,
    ) -> Any:
        """Approve or reject (async; needs an approver token); see `decide`."""
        return _unwrap(await self._send_async(_decision(request_id, verdict, comment, extras)))

    def extend(self, request_id: str, by: str) -> Any:
        """Give a pending request more time, e.g. `by="15m"` (needs an approver token)."""
        exchange = Exchange("POST", f"/v1/requests/{request_id}/extend", {"by": by}, 30)
        return _unwrap(self._send(exchange))

    def record_outcome(
        self, request: str | Verdict, outcome: Outcome = "ran", summary: str | None = None
    ) -> Any:
        """Record whether an approved call ran and what came of it (once per request).

        Args:
            request: the request id, or the Verdict `check()` returned.
            outcome: "ran", "failed" or "not_run".
            summary: a short line about the result, for the audit trail.

        Returns:
            The request, or None when the verdict had no request (policy allowed the call).
        """
        exchange = _outcome(request, outcome, summary)
        return None if exchange is None else _unwrap(self._send(exchange))

    async def record_outcome_async(
        self, request: str | Verdict, outcome: Outcome = "ran", summary: str | None = None
    ) -> Any:
        """`record_outcome()` for asyncio."""
        exchange = _outcome(request, outcome, summary)
        return None if exchange is None else _unwrap(await self._send_async(exchange))

    def cancel_session(self, session_id: str, reason: str | None = None) -> list[str]:
        """Withdraw every pending request of an agent session that ended; returns their ids."""
        body = _unwrap(self._send(_end_session(session_id, reason)))
        return [str(i) for i in body["cancelled"]]

    async def cancel_session_async(self, session_id: str, reason: str | None = None) -> list[str]:
        """`cancel_session()` for asyncio."""
        body = _unwrap(await self._send_async(_end_session(session_id, reason)))
        return [str(i) for i in body["cancelled"]]

    # -- ask and wait --------------------------------------------------------------------------

    def check(self, tool_name: str, tool_args: dict[str, Any] | None = None, **kw: Any) -> Verdict:
        """Ask gate about a call and block until it is decided or `timeout` passes.

        Args:
            tool_name: the tool, as policy rules name it.
            tool_args: its arguments (what `when` expressions see as `args`).
            **kw: summary, metadata, context, session_id, idempotency_key, agent_id, user_id,
                timeout (seconds; default: the client's).

        Returns:
            A Verdict; `.allowed` says whether to run the call, `.reason` is for the model.
        """
        flow, _ = self._flow(tool_name, tool_args, kw)
        return drive(flow, self._send)

    async def check_async(
        self, tool_name: str, tool_args: dict[str, Any] | None = None, **kw: Any
    ) -> Verdict:
        """`check()` for asyncio: waits without blocking the event loop."""
        flow, _ = self._flow(tool_name, tool_args, kw)
        return await drive_async(flow, self._send_async)

    def _flow(
        self, tool_name: str, tool_args: dict[str, Any] | None, kw: dict[str, Any]
    ) -> tuple[Flow, Call]:
        timeout = kw.pop("timeout", None)
        args = dict(tool_args or {})
        known = {"summary", "metadata", "context", "session_id", "idempotency_key"}
        known |= {"agent_id", "user_id"}
        unknown = set(kw) - known
        if unknown:
            raise TypeError(f"unknown argument(s) to check(): {sorted(unknown)}")
        call = Call(
            tool_name=tool_name,
            tool_args=args,
            agent_id=kw.get("agent_id") or self.agent_id,
            user_id=kw.get("user_id") or self.user_id,
            session_id=kw.get("session_id"),
            # A key per call makes the flow's POST retries harmless.
            idempotency_key=kw.get("idempotency_key") or f"sdk-{uuid.uuid4().hex}",
            summary=kw.get("summary") or summarise(tool_name, args),
            metadata=dict(kw.get("metadata") or {}),
            context={"source": "sdk", **(kw.get("context") or {})},
        )
        limit = self.timeout if timeout is None else float(timeout)
        flow = decide(
            call, url=self.url, limit=limit, token_hint=TOKEN_HINT, wait_slice=self.wait_slice
        )
        return flow, call


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


def _wait(request_id: str, timeout: float) -> Exchange:
    return Exchange(
        "GET", f"/v1/requests/{request_id}/wait?timeout={timeout:g}", None, timeout + 10
    )


def _cancel(request_id: str, reason: str | None) -> Exchange:
    body = {"reason": reason} if reason else None
    return Exchange("POST", f"/v1/requests/{request_id}/cancel", body, 30)


def _decision(
    request_id: str, verdict: str, comment: str | None, extras: dict[str, Any]
) -> Exchange:
    unknown = set(extras) - {"edited_args", "reasons", "grant"}
    if unknown:
        raise TypeError(f"unknown argument(s) to decide(): {sorted(unknown)}")
    body = {"verdict": verdict, "comment": comment}
    body.update({k: v for k, v in extras.items() if v is not None})
    return Exchange("POST", f"/v1/requests/{request_id}/decision", body, 30)


def _outcome(request: str | Verdict, outcome: str, summary: str | None) -> Exchange | None:
    request_id = request.request_id if isinstance(request, Verdict) else request
    if request_id is None:
        return None
    body = {"outcome": outcome, "summary": summary}
    return Exchange("POST", f"/v1/requests/{request_id}/outcome", body, 30)


def _end_session(session_id: str, reason: str | None) -> Exchange:
    from urllib.parse import quote

    body = {"reason": reason} if reason else None
    return Exchange("POST", f"/v1/sessions/{quote(session_id, safe='')}/cancel", body, 30)


def _reply(response: httpx.Response) -> Reply:
    try:
        return Reply(response.status_code, response.json() if response.content else None)
    except ValueError:
        # Say what came back, not what it said: the text is for the model to read.
        ctype = response.headers.get("content-type", "no content type").split(";")[0]
        size = len(response.content)
        return Reply(
            response.status_code,
            None,
            problem=f"the reply is not JSON ({ctype.strip()[:60]}, {size} bytes)",
        )


def _unwrap(reply: Reply) -> Any:
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


def _describe(exc: httpx.TransportError, timeout: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        return "connection refused" if "refused" in text else f"cannot connect: {exc}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


# -- seed-style PreToolUse hook ------------------------------------------------------------------


@dataclass
class HookContext:
    """What a PreToolUse hook sees: the tool call and per-request facts."""

    tool_name: str
    tool_args: dict[str, Any] = field(default_factory=dict)
    agent_id: str | None = None
    user_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class HookResult:
    """What a hook answers: `allow=False` blocks and `error` is shown to the model.

    `modified_args` is the full argument object to run with when an approver edited it.
    """

    allow: bool = True
    error: str | None = None
    modified_args: dict[str, Any] | None = None
    modified_result: Any = None
    side_effects: list[str] = field(default_factory=list)


class PreToolUseHook:
    """A PreToolUse hook that asks gate and waits for the verdict.

    Args:
        client: the GateClient to ask.
        timeout: seconds to wait for a person (default: the client's).
        on_no_rule: what to do when no rule covers the call ("allow" or "deny").
        fail_open: allow calls when gate is unreachable or errors (NOT recommended).
    """

    def __init__(
        self,
        client: GateClient,
        *,
        timeout: float | None = None,
        on_no_rule: Literal["allow", "deny"] = "allow",
        fail_open: bool = False,
    ) -> None:
        self.client = client
        self.timeout = timeout
        self.on_no_rule = on_no_rule
        self.fail_open = fail_open

    def __call__(self, ctx: HookContext) -> HookResult:
        """Ask gate about `ctx` and block until decided."""
        return self._result(self.client.check(ctx.tool_name, ctx.tool_args, **self._kw(ctx)))

    async def call_async(self, ctx: HookContext) -> HookResult:
        """Ask gate about `ctx` without blocking the event loop."""
        verdict = await self.client.check_async(ctx.tool_name, ctx.tool_args, **self._kw(ctx))
        return self._result(verdict)

    def _kw(self, ctx: HookContext) -> dict[str, Any]:
        meta = ctx.metadata
        session = meta.get("session_id") or meta.get("conversation_id")
        call_id = meta.get("tool_call_id") or meta.get("tool_use_id")
        kw: dict[str, Any] = {
            "agent_id": ctx.agent_id,
            "user_id": ctx.user_id,
            "metadata": meta,
            "session_id": str(session) if session else None,
            "timeout": self.timeout,
        }
        if call_id:
            kw["idempotency_key"] = str(call_id)
        return kw

    def _result(self, verdict: Verdict) -> HookResult:
        trail = f"gate: {verdict.kind}" + (
            f" (request {verdict.request_id})" if verdict.request else ""
        )
        allow = (
            verdict.allowed
            or (verdict.kind == "no_rule" and self.on_no_rule == "allow")
            or (self.fail_open and verdict.kind in GATE_DOWN)
        )
        if allow:
            return HookResult(
                allow=True,
                modified_args=verdict.updated_args,
                side_effects=[f"{trail}: {verdict.reason}"],
            )
        return HookResult(allow=False, error=verdict.reason, side_effects=[trail])


# -- decorator for plain functions -----------------------------------------------------------------


def require_approval(
    rule: str | None = None,
    *,
    client: GateClient | Callable[[], GateClient] | None = None,
    tool_name: str | None = None,
    summary: str | Callable[..., str] | None = None,
    timeout: float | None = None,
    metadata: dict[str, Any] | None = None,
) -> Callable[[F], F]:
    """Make a sync or async function run only once gate approves the call.

    The call is always asked about (`metadata.requires_confirmation`), so a function marked
    this way needs a person even when no rule names it; a rule that matches still decides
    approvers, timeout, or an outright allow/deny. When the approver edited the arguments, the
    function is called with the edited values.

    Args:
        rule: a label sent as `metadata.rule`, for `when` expressions and approvers to see.
        client: a GateClient, or a function returning one (default: `GateClient()` from env,
            made on first call).
        tool_name: the tool name policy sees (default: the function's name).
        summary: a line for approvers, or a function of the call's arguments returning one.
        timeout: seconds to wait for a person (default: the client's).
        metadata: more facts for policy.

    Raises:
        ApprovalDenied: when the call is not approved (rejected, expired, denied, gate down...).
    """

    def decorate(fn: F) -> F:
        name = tool_name or fn.__name__
        signature = inspect.signature(fn)
        holder: list[GateClient] = []

        def get_client() -> GateClient:
            if not holder:
                holder.append(client() if callable(client) else client or GateClient())
            return holder[0]

        def ask(
            args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[dict[str, Any], dict[str, Any]]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            tool_args = json.loads(json.dumps(dict(bound.arguments), default=repr))
            meta = {"requires_confirmation": True, **(metadata or {})}
            if rule:
                meta["rule"] = rule
            kw: dict[str, Any] = {"metadata": meta, "timeout": timeout}
            if summary is not None:
                kw["summary"] = (
                    summary(*bound.args, **bound.kwargs) if callable(summary) else summary
                )
            return tool_args, kw

        def settle(
            verdict: Verdict, args: tuple[Any, ...], kwargs: dict[str, Any], sent: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]]:
            if not verdict.allowed:
                raise ApprovalDenied(verdict.reason, verdict.request, verdict=verdict)
            edited = verdict.updated_args
            if edited is None:
                return args, kwargs
            return _with_edits(signature, args, kwargs, sent, edited, verdict)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                tool_args, kw = ask(args, kwargs)
                verdict = await get_client().check_async(name, tool_args, **kw)
                args, kwargs = settle(verdict, args, kwargs, tool_args)
                return await fn(*args, **kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tool_args, kw = ask(args, kwargs)
            args, kwargs = settle(
                get_client().check(name, tool_args, **kw), args, kwargs, tool_args
            )
            return fn(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


def _with_edits(
    signature: inspect.Signature,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    sent: dict[str, Any],
    edited: dict[str, Any],
    verdict: Verdict,
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments with the approver's edits applied (unchanged ones keep their
    Python objects); ApprovalDenied when the edits do not fit the function's parameters."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    extra = sorted(set(edited) - set(bound.arguments))
    missing = sorted(set(bound.arguments) - set(edited))
    if extra or missing:
        raise ApprovalDenied(
            f"gate: The approver edited the arguments of this call in a way the function cannot "
            f"take (unknown: {extra}, removed: {missing}), so it was not run.",
            verdict.request,
            verdict=verdict,
        )
    for name, value in edited.items():
        if value != sent.get(name):
            bound.arguments[name] = value
    return bound.args, bound.kwargs
