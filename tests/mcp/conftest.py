"""Fixtures for the MCP tests: a real gate, the real `gate mcp prompt|proxy` processes spawned
over stdio by the official SDK's client, and an upstream MCP server built with the SDK.

The `gate mcp` processes are under test; the gate they talk to (`live`) is the app read from a
gate.toml as `gate serve --config` reads it, served by uvicorn with gate's own protocol in a
thread of the test process (a `gate serve` process costs some 2.5 s of CPU to start). A test
that kills or restarts the gate starts a `gate serve` process of its own (`start_gate`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import pytest
import pytest_asyncio
from mcp import ClientSession, StdioServerParameters, stdio_client

from gate.app import create_app
from gate.config.settings import load_settings
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS
from tests.support.servers import ServerProcess, ThreadServer, waiters_in

HERE = Path(__file__).parent
UPSTREAM = [sys.executable, str(HERE / "upstream_server.py")]
#: `gate mcp prompt` with fast progress for the tests
PROMPT = ["prompt", "--progress-every", "0.2"]
#: what a module's tests on one shared `gate mcp` session are marked with: they and its
#: fixture run on the module's event loop, which the session's reader task lives on
SHARED_LOOP = pytest.mark.asyncio(loop_scope="module")

T = TypeVar("T")

#: rules in front of the standard ones; the proxy's tools are mcp__fixture__TOOL
MCP_RULES: list[dict[str, Any]] = [
    {
        "name": "blocked-vendors",
        "tools": ["mcp__*__pay_vendor"],
        "when": "args.vendor == 'EVIL'",
        "action": "deny",
        "reason": "That vendor is blocked",
    },
    {
        "name": "mcp-payments",
        "tools": ["mcp__*__pay_vendor", "mcp__*__flaky", "mcp__*__crash"],
        "approvers": ["group:finance"],
        "timeout": "10m",
    },
    {"name": "markers-allowed", "tools": ["mcp__*__write_marker"], "action": "allow"},
    {
        "name": "risky-bash",
        "tools": ["Bash"],
        "when": "args.command.contains('rm ')",
        "approvers": ["group:finance"],
        "timeout": "10m",
        "reason": "Deleting files needs a human",
    },
]


@dataclass
class Live:
    """A running gate and ways to talk to it as an approver or admin."""

    server: ServerProcess | ThreadServer

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, token: str = cfg.ADMIN) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30, verify=TLS
        )

    async def request(self, request_id: str) -> dict[str, Any]:
        async with self.api() as c:
            r = await c.get(f"/v1/requests/{request_id}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    async def find(self, tool_name: str, **args: Any) -> list[dict[str, Any]]:
        """Requests for `tool_name` whose arguments include `args` (any status)."""
        async with self.api() as c:
            r = await c.get("/v1/requests", params={"tool_name": tool_name, "limit": 100})
        assert r.status_code == 200, r.text
        items: list[dict[str, Any]] = r.json()["items"]
        return [i for i in items if all(i["tool_args"].get(k) == v for k, v in args.items())]

    async def pending(self, tool_name: str, timeout: float = 20, **args: Any) -> dict[str, Any]:
        """The pending request for this call, once it exists."""
        with anyio.fail_after(timeout):
            while True:
                found = [r for r in await self.find(tool_name, **args) if r["status"] == "pending"]
                if found:
                    return found[0]
                await anyio.sleep(0.05)

    async def long_polled(self, timeout: float = 20) -> None:
        """Once a long-poll is open on the server (from /metrics): a test that kills the
        server mid-wait must not kill it while the proxy still awaits its POST's answer."""
        with anyio.fail_after(timeout):
            while True:
                async with self.api() as c:
                    if waiters_in((await c.get("/metrics")).text) >= 1:
                        return
                await anyio.sleep(0.05)

    async def settled(self, request_id: str, timeout: float = 20) -> dict[str, Any]:
        """The request once it is no longer pending."""
        with anyio.fail_after(timeout):
            while True:
                request = await self.request(request_id)
                if request["status"] != "pending":
                    return request
                await anyio.sleep(0.05)

    async def decide(
        self, request_id: str, verdict: str, token: str = cfg.ALICE, **body: Any
    ) -> None:
        async with self.api(token) as c:
            r = await c.post(
                f"/v1/requests/{request_id}/decision", json={"verdict": verdict, **body}
            )
        assert r.status_code == 200, r.text

    async def audit(self, request_id: str) -> list[dict[str, Any]]:
        async with self.api() as c:
            r = await c.get(f"/v1/requests/{request_id}/audit")
        assert r.status_code == 200, r.text
        body = r.json()
        events: list[dict[str, Any]] = body["events"] if isinstance(body, dict) else body
        return events


@dataclass
class LiveProcess(Live):
    """A `gate serve` process and ways to talk to it (and to kill or restart it)."""

    server: ServerProcess


def gate_toml(tmp: Path) -> Path:
    """`tmp`/gate.toml: a fresh SQLite file, the MCP rules in front of the standard ones."""
    data = cfg.settings_data(migrated_sqlite(tmp / "gate.db"))
    data["rules"] = MCP_RULES + data["rules"]
    path = tmp / "gate.toml"
    path.write_text(cfg.to_toml(data))
    return path


def start_gate(tmp: Path) -> LiveProcess:
    """`gate serve` on `gate_toml(tmp)`, for a test that kills or restarts it."""
    return LiveProcess(ServerProcess(gate_toml(tmp)).start())


@pytest.fixture(scope="package")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One gate for the MCP tests (the app in a thread, see above), stopped after the last of
    them: tests tell their requests apart by unique arguments."""
    path = gate_toml(tmp_path_factory.mktemp("gate"))
    server = ThreadServer(create_app(load_settings(path))).start()
    try:
        yield Live(server)
    finally:
        server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_proxy(
    live: Live, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Shared]:
    """One `gate mcp proxy` (`proxy_args()`) per module, for its tests marked SHARED_LOOP;
    its upstream also has SHARED_SETTING=x in its environment."""
    tmp = tmp_path_factory.mktemp("proxy")
    async with shared_session(proxy_args(), live.url, tmp, SHARED_SETTING="x") as shared:
        yield shared


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_prompt(
    live: Live, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Shared]:
    """One `gate mcp prompt` (`PROMPT`) per module, for its tests marked SHARED_LOOP."""
    async with shared_session(PROMPT, live.url, tmp_path_factory.mktemp("prompt")) as shared:
        yield shared


@pytest.fixture
def prompt(shared_prompt: Shared) -> Turn:
    """This test's turn on the module's shared `gate mcp prompt` session."""
    return shared_prompt.turn()


@pytest.fixture
def proxy(shared_proxy: Shared) -> Turn:
    """This test's turn on the module's shared `gate mcp proxy` session."""
    return shared_proxy.turn()


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """The file the upstream appends one JSON line to per tool that really ran."""
    return tmp_path / "upstream-ran.jsonl"


def ran(marker: Path) -> list[dict[str, Any]]:
    """What the upstream ran, in order."""
    return json_lines(marker)


def json_lines(path: Path) -> list[Any]:
    """The JSON value on each line of `path` (none while it does not exist)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def unique(prefix: str) -> str:
    """A value no other test uses (tests share one gate server)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def gate_env(url: str, token: str | None = cfg.AGENT, **extra: str) -> dict[str, str]:
    """The environment an MCP client would give `gate mcp ...` (GATE_URL, GATE_TOKEN, ...)."""
    env = {"GATE_URL": url, **extra}
    if token:
        env["GATE_TOKEN"] = token
    return env


@asynccontextmanager
async def mcp_client(
    args: list[str], env: dict[str, str], **session_kw: Any
) -> AsyncIterator[ClientSession]:
    """The official SDK client, spawning `gate mcp ARGS` over stdio, initialized."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gate.cli", "mcp", *args], env=env
    )
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, **session_kw) as session,
    ):
        with anyio.fail_after(60):
            await session.initialize()
        yield session


@asynccontextmanager
async def upstream_client(env: dict[str, str]) -> AsyncIterator[ClientSession]:
    """The official SDK client connected straight to the upstream (no proxy), initialized."""
    params = StdioServerParameters(command=UPSTREAM[0], args=UPSTREAM[1:], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(60):
            await session.initialize()
        yield session


def proxy_args(*extra: str) -> list[str]:
    """`gate mcp proxy` in front of the stdio upstream, with fast progress for the tests."""
    return ["proxy", "--name", "fixture", "--progress-every", "0.2", *extra, "--", *UPSTREAM]


def pid_of(tag: str) -> int:
    """The pid of the process whose command line contains `tag` (stdio_client hides it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if tag.encode() in cmdline and b"gate.cli" in cmdline:
            return int(entry.name)
    raise AssertionError(f"no process with {tag!r} in its command line")


@asynccontextmanager
async def held_open(cm: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """`cm` entered and left by a task of its own, open while the block runs.

    For a module-scoped fixture: pytest-asyncio runs its setup and its teardown as two
    tasks, and the SDK's stdio client (anyio task groups inside) must be left by the task
    that entered it.
    """
    box: list[T] = []
    entered, leave = asyncio.Event(), asyncio.Event()

    async def owner() -> None:
        async with cm as value:
            box.append(value)
            entered.set()
            await leave.wait()

    task = asyncio.create_task(owner())
    waiting = asyncio.create_task(entered.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if not box:
        await task  # it failed before entering: raises why
        raise AssertionError("the shared session ended before it started")
    try:
        yield box[0]
    finally:
        leave.set()
        await task


@dataclass
class Shared:
    """One `gate mcp` session (and its upstream) that a module's tests take turns on.

    Only for tests that make calls and read results: a test that stops the proxy, its
    upstream or gate starts its own. Each test's calls carry values no other test uses.
    """

    session: ClientSession
    #: $UPSTREAM_MARKER and $UPSTREAM_HEARD of the upstream (see upstream_server.py)
    marker: Path
    heard: Path
    #: every message the server sent the client outside an answer (notifications)
    notes: list[Any]

    def turn(self) -> Turn:
        """A view of the session from now on, for one test."""
        return Turn(self, len(ran(self.marker)), len(json_lines(self.heard)), len(self.notes))


@dataclass
class Turn:
    """A test's turn on a `Shared` session: what happened since the test began."""

    shared: Shared
    ran_from: int
    heard_from: int
    notes_from: int

    @property
    def session(self) -> ClientSession:
        return self.shared.session

    def ran(self) -> list[dict[str, Any]]:
        """What the upstream ran during this test, in order."""
        return ran(self.shared.marker)[self.ran_from :]

    def heard(self) -> list[str]:
        """Every tool name the upstream was called with during this test."""
        return json_lines(self.shared.heard)[self.heard_from :]

    def notes(self) -> list[Any]:
        """The server's notifications during this test."""
        return self.shared.notes[self.notes_from :]


@asynccontextmanager
async def shared_session(
    args: list[str], url: str, tmp: Path, **extra_env: str
) -> AsyncIterator[Shared]:
    """`gate mcp ARGS` against gate at `url`, held open for a module's tests (`held_open`)."""
    marker, heard = tmp / "upstream-ran.jsonl", tmp / "upstream-heard.jsonl"
    env = gate_env(url, UPSTREAM_MARKER=str(marker), UPSTREAM_HEARD=str(heard), **extra_env)
    notes: list[Any] = []

    async def on_message(message: Any) -> None:
        notes.append(message)

    async with held_open(mcp_client(args, env, message_handler=on_message)) as session:
        yield Shared(session, marker, heard, notes)


@asynccontextmanager
async def running(call: Awaitable[T]) -> AsyncIterator[list[T]]:
    """`call` (a tool call, say) running while the block decides it: the list holds its
    result once the block is left (the call is awaited there)."""
    box: list[T] = []

    async def run() -> None:
        box.append(await call)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        yield box
