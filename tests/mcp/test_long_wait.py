"""Long approvals through MCP: a client with a short timeout of its own, the real proxy and
prompt tool, a real gate. Without progress the client gives up; with progress and a client
that resets its timeout on progress it gets the verdict after longer than its timeout; a call
whose client gave up is withdrawn and never runs, even when approved afterwards.

The facts these rely on (message shapes, which SDK option does what) are in
fixtures/long_approvals.json, with their sources.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import pytest_asyncio
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from tests.mcp.conftest import (
    SHARED_LOOP,
    UPSTREAM,
    Live,
    Shared,
    Turn,
    gate_env,
    mcp_client,
    proxy_args,
    ran,
    shared_session,
    unique,
)
from tests.support import config as cfg

FACTS = json.loads((Path(__file__).parent / "fixtures" / "long_approvals.json").read_text())
PAY = "mcp__fixture__pay_vendor"
#: the client's own timeout: far shorter than a person takes, longer than a progress beat
CLIENT_TIMEOUT = 1.5
#: how long the person takes in these tests: longer than the client's timeout
PERSON_TAKES = CLIENT_TIMEOUT * 2.5
#: the proxy with progress every 30 s: none comes within the client's timeout
#: why gate records a call whose client gave up as withdrawn
CANCELLED = "the MCP client cancelled the call"
SLOW_PROXY = ["proxy", "--name", "fixture", "--progress-every", "30", "--", *UPSTREAM]


class IdleTimeout(Exception):
    """The client's own timeout fired: nothing (no result, no progress) came for too long."""


async def call_resetting_on_progress(
    session: ClientSession, name: str, arguments: dict[str, Any], *, timeout: float
) -> types.CallToolResult:
    """`tools/call` with a timeout that each progress notification resets.

    The Python SDK has no such option (its `read_timeout_seconds` is a hard limit, see the
    fixture); this is what the TypeScript SDK's `resetTimeoutOnProgress: true` does, and what
    clients built on it (Claude Code, Cursor, VS Code) get: a cancelled call, sent to the server
    as `notifications/cancelled`, when the timer runs out.
    """
    with anyio.CancelScope() as scope:
        scope.deadline = anyio.current_time() + timeout

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            scope.deadline = anyio.current_time() + timeout

        result = await session.call_tool(name, arguments, progress_callback=on_progress)
    if scope.cancelled_caught:
        raise IdleTimeout(f"no progress or result for {timeout} s")
    assert isinstance(result, types.CallToolResult)
    return result


async def approve_late(live: Live, request_id: str) -> int:
    """A person approves the request: the HTTP status gate answers (200 if it was pending)."""
    async with live.api(cfg.ALICE) as c:
        r = await c.post(f"/v1/requests/{request_id}/decision", json={"verdict": "approve"})
    return r.status_code


async def assert_never_runs(
    live: Live, upstream_ran: Callable[[], list[dict[str, Any]]], request_id: str, reason: str
) -> None:
    """The request was withdrawn with `reason`, a late approval is refused, nothing ran."""
    done = await live.settled(request_id)
    assert done["status"] == "cancelled", done
    assert reason in (done["reason"] or ""), done["reason"]
    assert await approve_late(live, request_id) == 409
    assert (await live.request(request_id))["status"] == "cancelled"
    await anyio.sleep(1)  # time enough for a call that was going to run anyway
    assert upstream_ran() == []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_slow_proxy(
    live: Live, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Shared]:
    """One SLOW_PROXY for the module's tests marked SHARED_LOOP: each call it holds is given up
    by its client, and the proxy serves on."""
    async with shared_session(SLOW_PROXY, live.url, tmp_path_factory.mktemp("slow")) as shared:
        yield shared


@pytest.fixture
def slow_proxy(shared_slow_proxy: Shared) -> Turn:
    """This test's turn on the module's SLOW_PROXY session."""
    return shared_slow_proxy.turn()


def test_the_facts_name_their_sources() -> None:
    for fact in FACTS["facts"]:
        assert fact["source"].startswith(("https://", "mcp ")), fact


# -- the proxy ----------------------------------------------------------------------------------


@SHARED_LOOP
async def test_without_progress_the_sdk_read_timeout_fires_and_the_call_never_runs(
    live: Live, slow_proxy: Turn
) -> None:
    vendor = unique("sdk-timeout")
    s = slow_proxy.session
    with pytest.raises(MCPError) as caught:
        await s.call_tool(
            "pay_vendor",
            {"vendor": vendor, "amount": 5},
            read_timeout_seconds=CLIENT_TIMEOUT,
        )
    assert caught.value.code == types.REQUEST_TIMEOUT
    (request,) = await live.find(PAY, vendor=vendor)
    # the SDK sent notifications/cancelled for the timed-out call: the proxy withdrew it
    await assert_never_runs(live, slow_proxy.ran, request["id"], CANCELLED)
    assert not (await s.call_tool("seen_env", {"names": []})).is_error  # still serving
    assert [r["tool"] for r in slow_proxy.ran()] == ["seen_env"]


@SHARED_LOOP
async def test_without_progress_a_resetting_client_gives_up_and_the_call_never_runs(
    live: Live, slow_proxy: Turn
) -> None:
    vendor = unique("idle")
    with pytest.raises(IdleTimeout):
        await call_resetting_on_progress(
            slow_proxy.session,
            "pay_vendor",
            {"vendor": vendor, "amount": 5},
            timeout=CLIENT_TIMEOUT,
        )
    (request,) = await live.find(PAY, vendor=vendor)
    await assert_never_runs(live, slow_proxy.ran, request["id"], CANCELLED)


async def test_with_progress_a_resetting_client_gets_the_verdict_after_its_timeout(
    live: Live, marker: Path
) -> None:
    vendor = unique("patient")
    env = gate_env(live.url, UPSTREAM_MARKER=str(marker))
    async with mcp_client(proxy_args(), env) as s:  # progress every 0.2 s
        box: list[types.CallToolResult] = []
        started = anyio.current_time()
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                box.append(
                    await call_resetting_on_progress(
                        s, "pay_vendor", {"vendor": vendor, "amount": 7}, timeout=CLIENT_TIMEOUT
                    )
                )

            tg.start_soon(call)
            request = await live.pending(PAY, vendor=vendor)
            await anyio.sleep(PERSON_TAKES)
            assert ran(marker) == []
            await live.decide(request["id"], "approve")
        waited = anyio.current_time() - started
    assert waited > PERSON_TAKES > CLIENT_TIMEOUT
    (result,) = box
    assert not result.is_error, result
    assert ran(marker) == [{"tool": "pay_vendor", "args": {"vendor": vendor, "amount": 7}}]


# -- the prompt tool ------------------------------------------------------------------------------


async def test_prompt_tool_with_progress_answers_after_the_clients_timeout(live: Live) -> None:
    use_id = unique("toolu")
    arguments = {"tool_name": "Bash", "input": {"command": "rm -rf out"}, "tool_use_id": use_id}
    async with mcp_client(["prompt", "--progress-every", "0.2"], gate_env(live.url)) as s:
        box: list[types.CallToolResult] = []
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                result = await call_resetting_on_progress(
                    s, "approve", arguments, timeout=CLIENT_TIMEOUT
                )
                box.append(result)

            tg.start_soon(call)
            request = await live.pending("Bash", command="rm -rf out")
            await anyio.sleep(PERSON_TAKES)
            await live.decide(request["id"], "approve")
    first = box[0].content[0]
    assert isinstance(first, types.TextContent)
    assert json.loads(first.text)["behavior"] == "allow"


async def test_prompt_tool_whose_client_gave_up_is_withdrawn_and_stays_denied(live: Live) -> None:
    use_id = unique("toolu")
    command = f"rm -rf {unique('gone')}"
    arguments = {"tool_name": "Bash", "input": {"command": command}, "tool_use_id": use_id}
    async with mcp_client(["prompt", "--progress-every", "30"], gate_env(live.url)) as s:
        with pytest.raises(MCPError) as caught:
            await s.call_tool("approve", arguments, read_timeout_seconds=CLIENT_TIMEOUT)
        assert caught.value.code == types.REQUEST_TIMEOUT
        (request,) = await live.find("Bash", command=command)
        done = await live.settled(request["id"])
        assert done["status"] == "cancelled"
        assert await approve_late(live, request["id"]) == 409
        # asked again under the same tool_use_id, the answer is no: one approval, one run
        again = await s.call_tool("approve", arguments)
    first = again.content[0]
    assert isinstance(first, types.TextContent)
    assert json.loads(first.text)["behavior"] == "deny"
