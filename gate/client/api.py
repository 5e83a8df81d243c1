"""`GateClient`: the gate HTTP API from Python, blocking and `*_async`, over httpx.

`check()` runs `gate.asking.askflow.decide()`, the same flow `gate hook` runs (submit, long-poll in
slices, reconnect, withdraw at the deadline, the words the model reads); the raw calls
(`submit`, `get`, `wait`, `cancel`, `decide`, `extend`, `record_outcome`, `cancel_session`)
are one exchange each and raise `GateAPIError` on an error reply.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Generator
from typing import Any, Literal

import httpx

from gate.asking.askflow import DEFAULT_TIMEOUT, DEFAULT_URL, WAIT_SLICE, Flow, decide
from gate.asking.exchange import Exchange, Pause, Reply, Step, drive, round_trip
from gate.asking.toolcall import Call, Verdict, summarise
from gate.client.wire import drive_async, send, send_async, unwrap

#: the outcomes `record_outcome` accepts
Outcome = Literal["ran", "failed", "not_run"]

TOKEN_HINT = (
    "pass GateClient(token=...) or set GATE_TOKEN to an agent token from gate.toml [[tokens]] "
    '(role = "agent")'
)


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
        return send(self.http, exchange)

    async def _send_async(self, exchange: Exchange) -> Reply:
        return await send_async(self.ahttp, exchange)

    # -- raw API -------------------------------------------------------------------------------

    def submit(self, tool_name: str, tool_args: dict[str, Any] | None = None, **fields: Any) -> Any:
        """`POST /v1/gate` once: the policy answer (and the pending request for `ask`)."""
        return unwrap(self._send(self._submit(tool_name, tool_args, fields)))

    async def submit_async(
        self, tool_name: str, tool_args: dict[str, Any] | None = None, **fields: Any
    ) -> Any:
        """`POST /v1/gate` once (async)."""
        return unwrap(await self._send_async(self._submit(tool_name, tool_args, fields)))

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
        return unwrap(self._send(Exchange("GET", f"/v1/requests/{request_id}", None, 30)))

    async def get_async(self, request_id: str) -> Any:
        """`GET /v1/requests/{id}` (async)."""
        return unwrap(
            await self._send_async(Exchange("GET", f"/v1/requests/{request_id}", None, 30))
        )

    def wait(self, request_id: str, timeout: float = WAIT_SLICE) -> Any:
        """One long-poll: the request once final, or still pending after `timeout` (or
        sooner: the server ends a long-poll at its own `max_wait_seconds`, 300 s by default).

        A server holding all the waiters it may answers 503 with `Retry-After`: the wait
        is tried again then, within `timeout` (and the request read once when it is up).
        """
        flow = _waiting(request_id, timeout)
        step = next(flow)
        try:
            while True:  # a plain loop: an interrupt stops it as it is (nothing to withdraw)
                if isinstance(step, Exchange):
                    step = flow.send(self._send(step))
                else:
                    time.sleep(step.seconds)
                    step = flow.send(None)
        except StopIteration as done:
            return unwrap(done.value)

    async def wait_async(self, request_id: str, timeout: float = WAIT_SLICE) -> Any:
        """One long-poll (async), retried like `wait()`."""
        flow = _waiting(request_id, timeout)
        step = next(flow)
        try:
            while True:
                if isinstance(step, Exchange):
                    step = flow.send(await self._send_async(step))
                else:
                    await asyncio.sleep(step.seconds)
                    step = flow.send(None)
        except StopIteration as done:
            return unwrap(done.value)

    def cancel(self, request_id: str, reason: str | None = None) -> Any:
        """Withdraw a pending request."""
        return unwrap(self._send(_cancel(request_id, reason)))

    async def cancel_async(self, request_id: str, reason: str | None = None) -> Any:
        """Withdraw a pending request (async)."""
        return unwrap(await self._send_async(_cancel(request_id, reason)))

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
        return unwrap(self._send(_decision(request_id, verdict, comment, extras)))

    async def decide_async(
        self,
        request_id: str,
        verdict: Literal["approve", "reject"],
        comment: str | None = None,
        **extras: Any,
    ) -> Any:
        """Approve or reject (async; needs an approver token); see `decide`."""
        return unwrap(await self._send_async(_decision(request_id, verdict, comment, extras)))

    def extend(self, request_id: str, by: str) -> Any:
        """Give a pending request more time, e.g. `by="15m"` (needs an approver token)."""
        exchange = Exchange("POST", f"/v1/requests/{request_id}/extend", {"by": by}, 30)
        return unwrap(self._send(exchange))

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
        return None if exchange is None else unwrap(self._send(exchange))

    async def record_outcome_async(
        self, request: str | Verdict, outcome: Outcome = "ran", summary: str | None = None
    ) -> Any:
        """`record_outcome()` for asyncio."""
        exchange = _outcome(request, outcome, summary)
        return None if exchange is None else unwrap(await self._send_async(exchange))

    def cancel_session(self, session_id: str, reason: str | None = None) -> list[str]:
        """Withdraw every pending request of an agent session that ended; returns their ids."""
        body = unwrap(self._send(_end_session(session_id, reason)))
        return [str(i) for i in body["cancelled"]]

    async def cancel_session_async(self, session_id: str, reason: str | None = None) -> list[str]:
        """`cancel_session()` for asyncio."""
        body = unwrap(await self._send_async(_end_session(session_id, reason)))
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


def _wait(request_id: str, timeout: float) -> Exchange:
    return Exchange(
        "GET", f"/v1/requests/{request_id}/wait?timeout={timeout:g}", None, timeout + 10
    )


def _waiting(
    request_id: str, timeout: float, clock: Callable[[], float] = time.monotonic
) -> Generator[Step, Reply | None, Reply]:
    """A long-poll that follows a busy server's `Retry-After` until `timeout` is up (sans-IO).

    Returns the wait's reply; when the time is up before a wait was taken, the request as
    read then (still pending), as a wait that timed out would have answered.
    """
    deadline = clock() + max(0.0, timeout)
    while True:
        left = max(0.0, deadline - clock())
        reply = yield from round_trip(_wait(request_id, round(left, 3)))
        if reply.status != 503 or reply.retry_after is None:
            return reply
        if clock() + reply.retry_after >= deadline:
            yield Pause(max(0.0, deadline - clock()))
            read = Exchange("GET", f"/v1/requests/{request_id}", None, 30)
            return (yield from round_trip(read))
        yield Pause(reply.retry_after)


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


__all__ = ["GateClient", "Outcome"]
