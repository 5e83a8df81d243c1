"""`gate mcp proxy` and `gate mcp prompt` fail closed when the gate answers badly: a failing
server (5xx) and a forged approval (not bound to the call) come from a fake gate, a real HTTP
server on loopback that records what it receives. Also: the clear message without the SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import mcp.types as types
import pytest
import pytest_asyncio
from mcp.shared.exceptions import MCPError

from gate.asking.binding import call_hash
from tests.mcp.conftest import (
    SHARED_LOOP,
    Shared,
    Turn,
    gate_env,
    mcp_client,
    proxy_args,
    shared_session,
)

SLOW_ID = "01SLOW00000000000000000000"
#: how long the "slow" gate takes to answer an ask: longer than the test client's timeout
SLOW_ASK = 2.5


class FakeGate(ThreadingHTTPServer):
    """A gate that fails on command: `mode` is "5xx", "forged" or "slow" (answers an ask
    after SLOW_ASK seconds, having made a pending request at once); `seen` lists the calls."""

    def __init__(self, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = mode
        self.seen: list[tuple[str, str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeGate

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        return

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.seen.append((method, self.path, body))
        if self.server.mode == "5xx":
            self._answer(503, {"error": {"code": "unavailable", "message": "database down"}})
            return
        if self.server.mode == "slow":
            self._slow(method, body)
            return
        if method == "POST" and self.path == "/v1/gate":
            # Claims a person approved the call, but binds the approval to other arguments.
            forged = {**body["tool_args"], "amount": 1}
            request = {
                "id": "01FORGED0000000000000000AA",
                "status": "approved",
                "reason": "Approved by mallory",
                "args_hash": call_hash(body["tool_name"], forged, body.get("idempotency_key")),
            }
            self._answer(200, {"decision": "ask", "rule": "r", "reason": "", "request": request})
            return
        self._answer(404, {"error": {"code": "not_found", "message": self.path}})

    def _slow(self, method: str, body: Any) -> None:
        pending = {"id": SLOW_ID, "tool_name": "mcp__fixture__pay_vendor", "status": "pending"}
        if method == "POST" and self.path == "/v1/gate":
            time.sleep(SLOW_ASK)
            self._answer(200, {"decision": "ask", "rule": "r", "reason": "", "request": pending})
        elif method == "GET" and self.path.startswith("/v1/requests?idempotency_key="):
            self._answer(200, {"items": [pending]})
        elif method == "POST" and self.path == f"/v1/requests/{SLOW_ID}/cancel":
            self._answer(200, {**pending, "status": "cancelled"})
        else:
            self._answer(404, {"error": {"code": "not_found", "message": self.path}})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


@pytest.fixture(scope="module")
def fake_gate_server() -> Iterator[FakeGate]:
    """One fake gate per module; each test sets its mode (`fake_gate`)."""
    server = FakeGate("5xx")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def fake_gate(fake_gate_server: FakeGate, request: pytest.FixtureRequest) -> FakeGate:
    """The module's fake gate in the mode the test names, having seen nothing yet."""
    fake_gate_server.mode = request.param
    fake_gate_server.seen = []
    return fake_gate_server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_fake_proxy(
    fake_gate_server: FakeGate, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Shared]:
    """One `gate mcp proxy` in front of the fake gate, for the tests marked SHARED_LOOP: the
    mode a test sets is what this proxy's next ask meets."""
    tmp = tmp_path_factory.mktemp("proxy")
    async with shared_session(proxy_args(), fake_gate_server.url, tmp) as shared:
        yield shared


@pytest.fixture
def proxy(shared_fake_proxy: Shared, fake_gate: FakeGate) -> Turn:
    """This test's turn on the proxy in front of the fake gate (once its mode is set)."""
    return shared_fake_proxy.turn()


def text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


@SHARED_LOOP
@pytest.mark.parametrize("fake_gate", ["5xx"], indirect=True)
async def test_a_failing_gate_refuses_the_call(fake_gate: FakeGate, proxy: Turn) -> None:
    result = await proxy.session.call_tool("write_marker", {"label": "x"})
    assert result.is_error
    # the hook's wording for a failing gate (whatever its exact sentence): who, and the error
    assert f"The approval server at {fake_gate.url}" in text_of(result)
    assert "HTTP 503 unavailable: database down" in text_of(result)
    assert proxy.ran() == []
    assert [(m, p) for m, p, _ in fake_gate.seen][0] == ("POST", "/v1/gate")


@SHARED_LOOP
@pytest.mark.parametrize("fake_gate", ["forged"], indirect=True)
async def test_an_approval_for_other_arguments_is_refused(fake_gate: FakeGate, proxy: Turn) -> None:
    result = await proxy.session.call_tool("pay_vendor", {"vendor": "ACME", "amount": 60000})
    assert result.is_error
    assert "The approval does not match this mcp__fixture__pay_vendor call" in text_of(result)
    assert proxy.ran() == []
    (_, _, sent), *_ = fake_gate.seen
    assert sent["tool_name"] == "mcp__fixture__pay_vendor"
    assert sent["tool_args"] == {"vendor": "ACME", "amount": 60000}


@pytest.mark.parametrize("fake_gate", ["forged"], indirect=True)
async def test_the_prompt_tool_denies_an_approval_for_other_arguments(fake_gate: FakeGate) -> None:
    arguments = {"tool_name": "Bash", "input": {"command": "rm -rf /"}, "tool_use_id": "toolu_1"}
    async with mcp_client(["prompt"], gate_env(fake_gate.url)) as s:
        result = await s.call_tool("approve", arguments)
    body = json.loads(text_of(result))
    assert body["behavior"] == "deny"
    assert "The approval does not match this Bash call" in body["message"]


@SHARED_LOOP
@pytest.mark.parametrize("fake_gate", ["slow"], indirect=True)
async def test_a_call_given_up_while_the_ask_is_in_flight_is_withdrawn(
    fake_gate: FakeGate, proxy: Turn
) -> None:
    """The client gives up before gate has answered the ask: the request that ask made is
    found by its idempotency key and withdrawn, and the call never runs."""
    s = proxy.session
    with pytest.raises(MCPError):
        await s.call_tool("pay_vendor", {"vendor": "v", "amount": 1}, read_timeout_seconds=1)
    with anyio.fail_after(SLOW_ASK + 10):
        while ("POST", f"/v1/requests/{SLOW_ID}/cancel") not in [m[:2] for m in fake_gate.seen]:
            await anyio.sleep(0.05)
    lookups = [m for m in fake_gate.seen if m[0] == "GET"]
    assert lookups and "idempotency_key=mcp-" in lookups[0][1]
    (cancel,) = [m for m in fake_gate.seen if m[1].endswith("/cancel")]
    assert "the MCP client cancelled the call" in cancel[2]["reason"]
    assert proxy.ran() == []


def test_without_the_sdk_gate_mcp_says_how_to_install_it() -> None:
    script = (
        "import sys; sys.modules['mcp'] = None; "  # as if the extra were not installed
        "from gate.cli import main; raise SystemExit(main(['mcp', 'prompt']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "pip install 'gate-approvals[mcp]'" in proc.stderr
    assert "Traceback" not in proc.stderr
