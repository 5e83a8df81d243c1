"""MCP tasks (2025-11-25): a client that calls a tool as a task gets a task at once, and the
call's result when the person decides; a cancelled task, or a client that goes away, has its
request withdrawn and the call never runs.

The installed SDK's ClientSession cannot make task-augmented calls (it validates a tools/call
answer as a CallToolResult: see fixtures/long_approvals.json), so these tests speak JSON-RPC
over the real `gate mcp` process's stdio themselves, as a task-capable client would.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_asyncio
from anyio.abc import Process

from tests.mcp.conftest import SHARED_LOOP, Live, gate_env, held_open, proxy_args, ran, unique
from tests.support import config as cfg

PAY = "mcp__fixture__pay_vendor"
RELATED = "io.modelcontextprotocol/related-task"
FACTS = json.loads((Path(__file__).parent / "fixtures" / "long_approvals.json").read_text())


class RpcError(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.code = error.get("code")


class RawClient:
    """A JSON-RPC client over a `gate mcp` process's stdin and stdout."""

    def __init__(self, proc: Process) -> None:
        self.proc = proc
        self.next_id = 0
        self.waiting: dict[int, anyio.Event] = {}
        self.answers: dict[int, dict[str, Any]] = {}
        self.notes: list[dict[str, Any]] = []
        #: the server's initialize result
        self.init: dict[str, Any] = {}

    async def read(self) -> None:
        assert self.proc.stdout is not None
        buffer = b""
        async for chunk in self.proc.stdout:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                if "id" in message and ("result" in message or "error" in message):
                    self.answers[message["id"]] = message
                    self.waiting[message["id"]].set()
                elif "method" in message:
                    self.notes.append(message)

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send((json.dumps(message) + "\n").encode())

    async def request(self, method: str, params: dict[str, Any], timeout: float = 30) -> Any:
        """Send a request; its result (RpcError for an error answer)."""
        self.next_id += 1
        rid = self.next_id
        self.waiting[rid] = anyio.Event()
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with anyio.fail_after(timeout):
            await self.waiting[rid].wait()
        answer = self.answers.pop(rid)
        if "error" in answer:
            raise RpcError(answer["error"])
        return answer["result"]

    async def status(self, task_id: str, want: str, timeout: float = 20) -> dict[str, Any]:
        """Poll tasks/get until the task has status `want`."""
        with anyio.fail_after(timeout):
            while True:
                task: dict[str, Any] = await self.request("tasks/get", {"taskId": task_id})
                if task["status"] == want:
                    return task
                await anyio.sleep(0.1)


@asynccontextmanager
async def raw_client(args: list[str], env: dict[str, str]) -> AsyncIterator[RawClient]:
    """`gate mcp ARGS` started and initialized, speaking to a RawClient."""
    proc = await anyio.open_process(
        [sys.executable, "-m", "gate.cli", "mcp", *args], env={**os.environ, **env}, stderr=None
    )
    async with proc, anyio.create_task_group() as tg:
        client = RawClient(proc)
        tg.start_soon(client.read)
        client.init = await client.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "task-client", "version": "1"},
            },
            timeout=60,
        )
        await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        try:
            yield client
        finally:
            if proc.stdin is not None:
                await proc.stdin.aclose()
            with anyio.fail_after(30):
                await proc.wait()
            tg.cancel_scope.cancel()


@dataclass
class RawTurn:
    """A test's turn on the module's shared proxy (RawClient): what happened since it began."""

    client: RawClient
    marker: Path
    ran_from: int
    notes_from: int

    def ran(self) -> list[dict[str, Any]]:
        """What the upstream ran during this test."""
        return ran(self.marker)[self.ran_from :]

    def notes(self) -> list[dict[str, Any]]:
        """The proxy's notifications during this test."""
        return self.client.notes[self.notes_from :]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_tasks(
    live: Live, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[RawClient, Path]]:
    """One `gate mcp proxy` with a task-capable client, for the tests marked SHARED_LOOP
    that only make calls (those that end the session start their own)."""
    marker = tmp_path_factory.mktemp("tasks") / "upstream-ran.jsonl"
    env = gate_env(live.url, UPSTREAM_MARKER=str(marker))
    async with held_open(raw_client(proxy_args(), env)) as client:
        yield client, marker


@pytest.fixture
def tasks(shared_tasks: tuple[RawClient, Path]) -> RawTurn:
    """This test's turn on the shared task-capable session."""
    client, marker = shared_tasks
    return RawTurn(client, marker, len(ran(marker)), len(client.notes))


def call_as_task(name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments, "task": {"ttl": 60000}}
    if meta:
        params["_meta"] = meta
    return params


# -- the proxy ----------------------------------------------------------------------------------


@SHARED_LOOP
async def test_a_held_call_is_a_task_that_completes_when_the_person_approves(
    live: Live, tasks: RawTurn
) -> None:
    vendor = unique("task")
    c = tasks.client
    caps = c.init["capabilities"]
    assert caps["tasks"] == {"cancel": {}, "requests": {"tools": {"call": {}}}}
    tools = (await c.request("tools/list", {}))["tools"]
    assert {t["execution"]["taskSupport"] for t in tools} == {"optional"}

    args = {"vendor": vendor, "amount": 9}
    params = call_as_task("pay_vendor", args, progressToken="p1")
    created = await c.request("tools/call", params)
    task = created["task"]
    assert task["status"] == "working" and task["ttl"] == 60000 and task["pollInterval"] > 0
    assert {"taskId", "createdAt", "lastUpdatedAt"} <= set(task)
    request = await live.pending(PAY, vendor=vendor)
    # progress goes on while the person decides, tagged with the task
    with anyio.fail_after(20):
        while not [n for n in tasks.notes() if n["method"] == "notifications/progress"]:
            await anyio.sleep(0.05)
    note = [n for n in tasks.notes() if n["method"] == "notifications/progress"][-1]["params"]
    assert note["progressToken"] == "p1"
    assert note["_meta"][RELATED] == {"taskId": task["taskId"]}
    assert (await c.request("tasks/get", {"taskId": task["taskId"]}))["status"] == "working"
    assert tasks.ran() == []

    async with anyio.create_task_group() as tg:  # tasks/result waits for the decision
        box: list[dict[str, Any]] = []

        async def result() -> None:
            box.append(await c.request("tasks/result", {"taskId": task["taskId"]}))

        tg.start_soon(result)
        await anyio.sleep(0.5)
        assert box == []
        await live.decide(request["id"], "approve")
    done = await c.status(task["taskId"], "completed")
    assert done["taskId"] == task["taskId"]
    (answer,) = box
    assert answer["content"] == [{"type": "text", "text": f"paid {vendor} 9"}]
    assert not answer.get("isError")
    assert answer["_meta"][RELATED] == {"taskId": task["taskId"]}
    assert tasks.ran() == [{"tool": "pay_vendor", "args": args}]
    assert (await live.request(request["id"]))["outcome"] == "ran"


@SHARED_LOOP
async def test_a_rejected_task_fails_with_the_reason_and_does_not_run(
    live: Live, tasks: RawTurn
) -> None:
    vendor = unique("task-no")
    c = tasks.client
    created = await c.request("tools/call", call_as_task("pay_vendor", {"vendor": vendor}))
    task_id = created["task"]["taskId"]
    request = await live.pending(PAY, vendor=vendor)
    await live.decide(request["id"], "reject", comment="not this month")
    failed = await c.status(task_id, "failed")
    answer = await c.request("tasks/result", {"taskId": task_id})
    assert answer["isError"] is True
    assert "not this month" in answer["content"][0]["text"]
    assert "not this month" in failed["statusMessage"]
    assert tasks.ran() == []


@SHARED_LOOP
async def test_a_cancelled_task_is_withdrawn_and_never_runs_even_if_approved_later(
    live: Live, tasks: RawTurn
) -> None:
    vendor = unique("task-cancel")
    c = tasks.client
    created = await c.request("tools/call", call_as_task("pay_vendor", {"vendor": vendor}))
    task_id = created["task"]["taskId"]
    request = await live.pending(PAY, vendor=vendor)
    cancelled = await c.request("tasks/cancel", {"taskId": task_id})
    assert cancelled["status"] == "cancelled"
    # the answer came once the request was withdrawn: an approver now finds it so
    done = await live.request(request["id"])
    assert done["status"] == "cancelled"
    assert "the MCP client cancelled the task" in (done["reason"] or "")
    async with live.api(cfg.ALICE) as api:
        late = await api.post(f"/v1/requests/{request['id']}/decision", json={"verdict": "approve"})
    assert late.status_code == 409
    answer = await c.request("tasks/result", {"taskId": task_id})
    assert answer["isError"] is True and "will not run" in answer["content"][0]["text"]
    assert (await c.request("tasks/get", {"taskId": task_id}))["status"] == "cancelled"
    try:  # a finished task cannot be cancelled again (-32602, as the spec says)
        await c.request("tasks/cancel", {"taskId": task_id})
        raise AssertionError("cancelled twice")
    except RpcError as exc:
        assert exc.code == -32602
    await anyio.sleep(1)
    assert tasks.ran() == []


async def test_a_client_that_goes_away_has_its_tasks_withdrawn(live: Live, marker: Path) -> None:
    vendor = unique("task-gone")
    env = gate_env(live.url, UPSTREAM_MARKER=str(marker))
    async with raw_client(proxy_args(), env) as c:
        await c.request("tools/call", call_as_task("pay_vendor", {"vendor": vendor}))
        request = await live.pending(PAY, vendor=vendor)
    # leaving the block closed the proxy's stdin: it withdrew the request and exited
    done = await live.settled(request["id"])
    assert done["status"] == "cancelled"
    assert "the MCP client cancelled the task or disconnected" in (done["reason"] or "")
    async with live.api(cfg.ALICE) as api:
        late = await api.post(f"/v1/requests/{request['id']}/decision", json={"verdict": "approve"})
    assert late.status_code == 409
    assert ran(marker) == []


@SHARED_LOOP
async def test_unknown_tools_and_unknown_tasks_are_errors(live: Live, tasks: RawTurn) -> None:
    c = tasks.client
    for method, params in [
        ("tools/call", call_as_task("Pay_Vendor", {"vendor": "x"})),  # no task is made
        ("tasks/get", {"taskId": "no-such-task"}),
        ("tasks/result", {"taskId": "no-such-task"}),
        ("tasks/cancel", {"taskId": "no-such-task"}),
    ]:
        try:
            await c.request(method, params)
            raise AssertionError(f"{method} answered")
        except RpcError as exc:
            assert exc.code == -32602, (method, exc)
    assert tasks.ran() == []


# -- the prompt tool ------------------------------------------------------------------------------


async def test_the_prompt_tool_answers_as_a_task(live: Live) -> None:
    command = f"rm -rf {unique('dir')}"
    arguments = {"tool_name": "Bash", "input": {"command": command}, "tool_use_id": unique("tu")}
    async with raw_client(["prompt", "--progress-every", "0.2"], gate_env(live.url)) as c:
        assert "tasks" in c.init["capabilities"]
        (tool,) = (await c.request("tools/list", {}))["tools"]
        assert tool["execution"] == {"taskSupport": "optional"}
        created = await c.request("tools/call", call_as_task("approve", arguments))
        task_id = created["task"]["taskId"]
        request = await live.pending("Bash", command=command)
        await live.decide(request["id"], "approve")
        answer = await c.request("tasks/result", {"taskId": task_id})
        assert (await c.request("tasks/get", {"taskId": task_id}))["status"] == "completed"
    assert json.loads(answer["content"][0]["text"]) == {
        "behavior": "allow",
        "updatedInput": {"command": command},
    }


def test_the_spec_facts_cover_tasks() -> None:
    text = json.dumps(FACTS)
    for word in ("tasks/get", "tasks/result", "tasks/cancel", "taskSupport", RELATED):
        assert word in text
