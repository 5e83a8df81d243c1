"""Ask gate from inside an MCP server: the shared flow of `gate.asking.askflow`, driven with anyio.

`gate mcp prompt` and `gate mcp proxy` answer MCP requests on an event loop, so they drive
`gate.asking.askflow.decide()` (the same submit, long-poll, reconnect, own-deadline, withdraw and
binding check as `gate hook` and the SDK) over httpx, asynchronously, and add what an MCP
server needs around it:

* a heartbeat while a person decides: the caller's `beat` runs every `beat_every` seconds
  (the servers send MCP progress notifications from it, so clients' idle timeouts do not
  fire);
* withdrawal when the wait is abandoned: the MCP client cancelled the call, or the process is
  being stopped, or its MCP task was cancelled. The flow withdraws on its own deadline; here a
  cancelled wait withdraws the request it was waiting for before the cancellation goes on,
  and one cut short while the ask itself was in flight finds the request that ask may have
  made by its idempotency key and withdraws it;
* the outcome after the call (`report_outcome()`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
import httpx

from gate.asking.aftercall import Report, report_outcome
from gate.asking.askflow import CANCEL_TIMEOUT, decide
from gate.asking.exchange import Exchange, Pause, Reply, Step
from gate.asking.toolcall import Call, Verdict
from gate.asking.wording import TOKEN_FIX
from gate.client.wire import send_async

#: heartbeat period while waiting for a person; well inside the 60 s request timeout that
#: MCP clients commonly reset on progress
BEAT_EVERY = 10.0

Beat = Callable[[float, str], Awaitable[None]]
T = TypeVar("T")


class Asker:
    """Asks one gate server about tool calls, asynchronously (one connection pool)."""

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        token_hint: str = TOKEN_FIX,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.token_hint = token_hint if token else "no token was sent: " + token_hint
        self.http = httpx.AsyncClient(
            base_url=self.url, headers=headers, transport=transport, timeout=30
        )
        #: set when the process is being stopped: the reason a withdrawn request gives
        self.stopping: str | None = None

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.http.aclose()

    async def send(self, exchange: Exchange) -> Reply:
        """Make one HTTP exchange of a flow; a transport failure is `Reply(0, problem=...)`."""
        return await send_async(self.http, exchange)

    async def ask(
        self,
        call: Call,
        *,
        limit: float,
        beat: Beat | None = None,
        beat_every: float = BEAT_EVERY,
        cancelled_because: str = "the MCP client cancelled the call or disconnected",
    ) -> Verdict:
        """Ask gate about `call` and wait up to `limit` seconds for the verdict.

        If the wait is cancelled, the pending request is withdrawn first (with
        `cancelled_because`, or the reason the process is stopping) so approvers are no
        longer asked about a call that can no longer run.
        """
        flow = decide(call, url=self.url, limit=max(0.0, limit), token_hint=self.token_hint)
        pending: list[str] = []  # the request being waited for, once there is one
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            if beat is not None:
                tg.start_soon(_heartbeat, beat, beat_every, started, pending)
            try:
                verdict = await self._drive(flow, pending)
            except anyio.get_cancelled_exc_class():
                why = self.stopping or cancelled_because
                with anyio.CancelScope(shield=True):
                    if pending and pending[0]:
                        await self.withdraw(pending[0], why)
                    elif pending:  # cancelled while the ask was in flight: it may have landed
                        await self.withdraw_asked(call, why)
                raise
            finally:
                tg.cancel_scope.cancel()
        return verdict

    async def _drive(
        self, flow: Generator[Step, Reply | None, T], pending: list[str] | None = None
    ) -> T:
        """Run a flow on the event loop; `pending` tracks the request being waited for."""
        step = next(flow)
        try:
            while True:
                if isinstance(step, Pause):
                    await anyio.sleep(step.seconds)
                    step = flow.send(None)
                    continue
                if pending is not None and not pending:
                    pending.append("")  # asked, no request known yet (see withdraw_asked)
                reply = await self.send(step)
                if pending is not None:
                    _note_pending(reply, pending)
                step = flow.send(reply)
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def withdraw(self, request_id: str, reason: str) -> None:
        """Cancel a pending request nobody will act on (best effort, a few seconds at most)."""
        with anyio.move_on_after(CANCEL_TIMEOUT + 1):
            await self.send(
                Exchange(
                    "POST",
                    f"/v1/requests/{request_id}/cancel",
                    {"reason": reason},
                    CANCEL_TIMEOUT,
                )
            )

    async def withdraw_asked(self, call: Call, reason: str) -> None:
        """Withdraw the request an ask cut short may have made, found by its idempotency key."""
        key = quote(call.idempotency_key or "", safe="")
        if not key:
            return
        with anyio.move_on_after(CANCEL_TIMEOUT + 1):
            found = await self.send(
                Exchange("GET", f"/v1/requests?idempotency_key={key}&limit=1", None, CANCEL_TIMEOUT)
            )
            items = found.body.get("items") if isinstance(found.body, dict) else None
            if found.status != 200 or not isinstance(items, list) or not items:
                return
            item = items[0]
            if (
                isinstance(item, dict)
                and item.get("tool_name") == call.tool_name
                and item.get("status") == "pending"
                and isinstance(item.get("id"), str)
            ):
                await self.withdraw(item["id"], reason)

    async def record(
        self, call: Call, *, key: str, ran_with: dict[str, Any], outcome: str, summary: str | None
    ) -> Report:
        """Record what came of a call gate made a request for (`ran` / `failed`)."""
        flow = report_outcome(
            key=key,
            tool_name=call.tool_name,
            outcome=outcome,
            summary=summary,
            tool_args=ran_with,
        )
        return await self._drive(flow)


def _note_pending(reply: Reply, pending: list[str]) -> None:
    """Remember the pending request a reply names (submit's `ask`, or a wait slice).

    `pending` is empty before the ask is sent, `[""]` once it is sent with no request known,
    then `[id]` while that request is pending, and `["-"]`-free empty again once it is not.
    """
    body = reply.body if reply.status == 200 and isinstance(reply.body, dict) else None
    if body is None:
        return
    request = body.get("request") if body.get("decision") == "ask" else body
    if isinstance(request, dict) and isinstance(request.get("id"), str):
        pending[:] = [request["id"]] if request.get("status") == "pending" else []


async def _heartbeat(beat: Beat, every: float, started: float, pending: list[str]) -> None:
    while True:
        await anyio.sleep(every)
        waited = time.monotonic() - started
        what = f"request {pending[0]}" if pending and pending[0] else "the request"
        await beat(waited, f"Waiting for approval in gate ({what}, {waited:.0f} s so far)")
