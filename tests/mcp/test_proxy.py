"""`gate mcp proxy`: the real proxy process, spawned by the official SDK client over stdio,
in front of an upstream MCP server built with the same SDK, against a real gate (a `gate serve`
process where the test restarts it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import pytest_asyncio
from mcp.shared.exceptions import MCPError

from gate.mcp import _parser as mcp_parser
from gate.mcp.proxy import run as run_proxy
from gate.mcp.tasks import Tasks
from tests.mcp.conftest import (
    SHARED_LOOP,
    UPSTREAM,
    Live,
    Shared,
    Turn,
    gate_env,
    mcp_client,
    pid_of,
    proxy_args,
    ran,
    running,
    shared_session,
    start_gate,
    unique,
    upstream_client,
)
from tests.support import config as cfg
from tests.support.servers import free_port

PAY = "mcp__fixture__pay_vendor"

# The tests that only make calls and read results take turns on one proxy session (the
# `proxy` fixture, on the module's event loop: SHARED_LOOP); those that stop it, or need other
# options or another gate, start their own.


def text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


# -- pass-through -----------------------------------------------------------------------------


@SHARED_LOOP
async def test_everything_but_tools_call_passes_through_unchanged(
    live: Live, marker: Path, proxy: Turn
) -> None:
    env = gate_env(live.url, UPSTREAM_MARKER=str(marker))
    async with upstream_client(env) as direct:
        want_init = direct.initialize_result
        want = [
            await direct.list_tools(),
            await direct.list_resources(),
            await direct.list_resource_templates(),
            await direct.read_resource("fixture://readme"),
            await direct.list_prompts(),
            await direct.get_prompt("greet", {"name": "Ada"}),
        ]
    proxied = proxy.session
    got_init = proxied.initialize_result
    got = [
        await proxied.list_tools(),
        await proxied.list_resources(),
        await proxied.list_resource_templates(),
        await proxied.read_resource("fixture://readme"),
        await proxied.list_prompts(),
        await proxied.get_prompt("greet", {"name": "Ada"}),
    ]
    assert got_init is not None and want_init is not None
    assert got_init.server_info == want_init.server_info
    assert got_init.instructions == want_init.instructions
    # The two things the proxy adds: its own MCP tasks (a call held for a person may be
    # answered as a task), and each tool marked as callable as one.
    assert got_init.capabilities.tasks == Tasks.capability()
    assert got_init.capabilities.model_copy(update={"tasks": None}) == want_init.capabilities
    assert all(t.execution and t.execution.task_support == "optional" for t in got[0].tools)
    got[0] = got[0].model_copy(
        update={"tools": [t.model_copy(update={"execution": None}) for t in got[0].tools]}
    )
    for mine, theirs in zip(got, want, strict=True):
        assert mine.model_dump(by_alias=True) == theirs.model_dump(by_alias=True)
    assert "write_marker" in [t.name for t in got[0].tools]
    assert ran(marker) == [] and proxy.ran() == []  # listing and reading ran no tool


@SHARED_LOOP
async def test_upstream_notifications_and_progress_reach_the_client(proxy: Turn) -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    result = await proxy.session.call_tool("announce", {}, progress_callback=on_progress)
    with anyio.fail_after(10):
        while not any(isinstance(n, types.ResourceListChangedNotification) for n in proxy.notes()):
            await anyio.sleep(0.02)
    assert text_of(result) == "announced"
    assert [m for _, m in progress][-1] == "halfway"  # the upstream's own progress, relayed
    assert [v for v, _ in progress] == sorted(v for v, _ in progress)


@SHARED_LOOP
async def test_upstream_errors_pass_through(proxy: Turn) -> None:
    with pytest.raises(MCPError) as raised:
        await proxy.session.get_prompt("no-such-prompt", {})
    assert "no-such-prompt" in raised.value.message


@SHARED_LOOP
async def test_upstream_never_sees_the_gate_token(proxy: Turn) -> None:
    # the shared proxy was started with GATE_URL, GATE_TOKEN and SHARED_SETTING=x
    result = await proxy.session.call_tool(
        "seen_env", {"names": ["GATE_TOKEN", "GATE_URL", "SHARED_SETTING"]}
    )
    assert not result.is_error, text_of(result)
    assert json.loads(text_of(result)) == ["SHARED_SETTING"]


# -- allow, deny ------------------------------------------------------------------------------


@SHARED_LOOP
async def test_allowed_and_ungated_calls_are_forwarded(proxy: Turn) -> None:
    label = unique("allowed")
    allowed = await proxy.session.call_tool("write_marker", {"label": label})  # markers-allowed
    ungated = await proxy.session.call_tool("seen_env", {"names": []})  # no rule: forwarded
    assert not allowed.is_error and text_of(allowed) == f"wrote {label}"
    assert allowed.structured_content == {"result": f"wrote {label}"}
    assert not ungated.is_error
    assert proxy.ran() == [
        {"tool": "write_marker", "args": {"label": label}},
        {"tool": "seen_env", "args": {"names": []}},
    ]


@SHARED_LOOP
async def test_policy_deny_is_an_error_result_and_the_upstream_is_not_called(
    proxy: Turn,
) -> None:
    result = await proxy.session.call_tool("pay_vendor", {"vendor": "EVIL", "amount": 1})
    assert result.is_error
    assert text_of(result).startswith("gate: Blocked by rule 'blocked-vendors': That vendor is")
    assert "standing policy" in text_of(result)
    assert proxy.ran() == []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_strict_proxy(
    live: Live, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Shared]:
    """A proxy with `--on-no-rule deny --timeout 1`, for two tests marked SHARED_LOOP: one
    calls a tool no rule covers (only --on-no-rule matters), the other one a rule holds for a
    person (only --timeout matters)."""
    args = proxy_args("--on-no-rule", "deny", "--timeout", "1")
    async with shared_session(args, live.url, tmp_path_factory.mktemp("strict")) as shared:
        yield shared


@pytest.fixture
def strict_proxy(shared_strict_proxy: Shared) -> Turn:
    """This test's turn on the module's `--on-no-rule deny --timeout 1` proxy."""
    return shared_strict_proxy.turn()


@SHARED_LOOP
async def test_on_no_rule_deny_refuses_ungated_calls(strict_proxy: Turn) -> None:
    result = await strict_proxy.session.call_tool("seen_env", {"names": []})
    assert result.is_error and "--on-no-rule deny" in text_of(result)
    assert strict_proxy.ran() == []


# -- ask: approve, edit, reject; progress; outcome ---------------------------------------------


@SHARED_LOOP
async def test_approved_call_runs_with_progress_and_its_outcome_is_recorded(
    live: Live, proxy: Turn
) -> None:
    vendor = unique("acme")
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    args = {"vendor": vendor, "amount": 60}
    async with running(
        proxy.session.call_tool("pay_vendor", args, progress_callback=on_progress)
    ) as box:
        request = await live.pending(PAY, vendor=vendor)
        with anyio.fail_after(20):
            while len(progress) < 2:  # the client hears from the proxy while a person decides
                await anyio.sleep(0.05)
        assert proxy.ran() == []  # nothing runs before the approval
        await live.decide(request["id"], "approve", comment="invoice checked")
    result = box[0]
    assert not result.is_error and text_of(result) == f"paid {vendor} 60"
    assert proxy.ran() == [{"tool": "pay_vendor", "args": {"vendor": vendor, "amount": 60}}]
    # a beat may come while the ask is in flight ("the request"); once asked, each names it
    assert all(msg and msg.startswith("Waiting for approval in gate") for _, msg in progress)
    assert request["id"] in str(progress[-1][1])
    assert [v for v, _ in progress] == sorted(v for v, _ in progress)  # progress only grows
    assert request["session_id"].startswith("mcp-fixture-")
    assert request["agent_id"] == "mcp"  # the SDK client's name from initialize
    done = await live.request(request["id"])
    assert done["status"] == "approved" and done["outcome"] == "ran"
    kinds = [e["kind"] for e in await live.audit(request["id"])]
    assert kinds[-1] == "ran"


@SHARED_LOOP
async def test_edited_arguments_are_what_runs(live: Live, proxy: Turn) -> None:
    vendor = unique("edit")
    s = proxy.session
    async with running(s.call_tool("pay_vendor", {"vendor": vendor, "amount": 900})) as box:
        request = await live.pending(PAY, vendor=vendor)
        edited = {"vendor": vendor, "amount": 90}
        await live.decide(request["id"], "approve", comment="a tenth", edited_args=edited)
    assert text_of(box[0]) == f"paid {vendor} 90"
    assert proxy.ran() == [{"tool": "pay_vendor", "args": edited}]
    assert (await live.request(request["id"]))["outcome"] == "ran"


@SHARED_LOOP
async def test_rejected_call_returns_the_comment_and_does_not_run(live: Live, proxy: Turn) -> None:
    vendor = unique("nope")
    s = proxy.session
    async with running(s.call_tool("pay_vendor", {"vendor": vendor, "amount": 5})) as box:
        request = await live.pending(PAY, vendor=vendor)
        await live.decide(request["id"], "reject", comment="not this vendor")
    assert box[0].is_error
    assert "not this vendor" in text_of(box[0])
    assert "A person reviewed this mcp__fixture__pay_vendor call and said no" in text_of(box[0])
    assert proxy.ran() == []


@SHARED_LOOP
async def test_tool_error_after_approval_is_passed_on_and_recorded_as_failed(
    live: Live, proxy: Turn
) -> None:
    reason = unique("disk full")
    s = proxy.session
    async with running(s.call_tool("flaky", {"reason": reason})) as box:
        request = await live.pending("mcp__fixture__flaky", reason=reason)
        await live.decide(request["id"], "approve")
    assert box[0].is_error and reason in text_of(box[0])
    assert proxy.ran() == [{"tool": "flaky", "args": {"reason": reason}}]
    assert (await live.request(request["id"]))["outcome"] == "failed"
    last = (await live.audit(request["id"]))[-1]
    assert last["kind"] == "failed" and reason in json.dumps(last["detail"])


# -- failing closed ---------------------------------------------------------------------------


async def test_gate_down_refuses_and_the_upstream_is_not_called(marker: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    async with mcp_client(proxy_args(), gate_env(down, UPSTREAM_MARKER=str(marker))) as s:
        result = await s.call_tool("write_marker", {"label": "x"})
    assert result.is_error
    assert f"The approval server at {down} could not be reached" in text_of(result)
    assert ran(marker) == []


async def test_bad_token_refuses(live: Live, marker: Path) -> None:
    env = gate_env(live.url, token="tok-wrong", UPSTREAM_MARKER=str(marker))
    async with mcp_client(proxy_args(), env) as s:
        result = await s.call_tool("write_marker", {"label": "x"})
    assert result.is_error and "refused the hook's credentials" in text_of(result)
    assert "GATE_TOKEN" in text_of(result)
    assert ran(marker) == []


async def test_approver_token_cannot_ask(live: Live, marker: Path) -> None:
    env = gate_env(live.url, token=cfg.ALICE, UPSTREAM_MARKER=str(marker))
    async with mcp_client(proxy_args(), env) as s:
        result = await s.call_tool("write_marker", {"label": "x"})
    assert result.is_error and "HTTP 403" in text_of(result)
    assert ran(marker) == []


@SHARED_LOOP
async def test_own_deadline_withdraws_and_refuses(live: Live, strict_proxy: Turn) -> None:
    vendor = unique("slow")
    result = await strict_proxy.session.call_tool("pay_vendor", {"vendor": vendor, "amount": 5})
    # The proxy withdraws at its deadline (or the server expires the request at the deadline
    # the proxy sent with it): either way nobody is left deciding, and nothing ran.
    assert result.is_error and "No human rejected it" in text_of(result)
    (request,) = await live.find(PAY, vendor=vendor)
    assert (await live.settled(request["id"]))["status"] in ("cancelled", "expired")
    assert strict_proxy.ran() == []


@SHARED_LOOP
async def test_client_cancel_withdraws_the_request(live: Live, proxy: Turn) -> None:
    vendor = unique("cancel")
    s = proxy.session
    async with anyio.create_task_group() as tg:
        tg.start_soon(s.call_tool, "pay_vendor", {"vendor": vendor, "amount": 5})
        request = await live.pending(PAY, vendor=vendor)
        tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled for the call
    done = await live.settled(request["id"])
    # the proxy is still serving after the cancellation
    assert not (await s.call_tool("seen_env", {"names": []})).is_error
    assert done["status"] == "cancelled"
    assert "the MCP client cancelled the call" in (done["reason"] or "")
    assert [r["tool"] for r in proxy.ran()] == ["seen_env"]


async def test_stopping_the_proxy_withdraws_the_request(live: Live, marker: Path) -> None:
    vendor, tag = unique("sigterm"), unique("tag")
    args = proxy_args("--metadata", f"test={tag}")
    async with mcp_client(args, gate_env(live.url, UPSTREAM_MARKER=str(marker))) as s:
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.call_tool, "pay_vendor", {"vendor": vendor, "amount": 5})
            request = await live.pending(PAY, vendor=vendor)
            os.kill(pid_of(f"test={tag}"), signal.SIGTERM)
            done = await live.settled(request["id"])
            tg.cancel_scope.cancel()
    assert done["status"] == "cancelled"
    assert "gate mcp proxy fixture was stopped (SIGTERM)" in (done["reason"] or "")
    assert ran(marker) == []


async def test_client_that_vanishes_mid_call_gets_the_request_withdrawn(
    live: Live, marker: Path
) -> None:
    """A client that crashes sends no cancellation: its stdin just closes (EOF)."""
    vendor = unique("gone")
    frames = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "crashy", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "pay_vendor", "arguments": {"vendor": vendor, "amount": 5}},
        },
    ]
    env = {**os.environ, **gate_env(live.url, UPSTREAM_MARKER=str(marker))}
    proc = await anyio.open_process(
        [sys.executable, "-m", "gate.cli", "mcp", *proxy_args()], env=env, stderr=None
    )
    async with proc:
        assert proc.stdin is not None
        await proc.stdin.send("".join(json.dumps(f) + "\n" for f in frames).encode())
        request = await live.pending(PAY, vendor=vendor)
        await proc.stdin.aclose()
        with anyio.fail_after(30):
            await proc.wait()
    done = await live.settled(request["id"])
    assert done["status"] == "cancelled"
    assert "the MCP client cancelled the call or disconnected" in (done["reason"] or "")
    assert ran(marker) == []


# -- the upstream dies ------------------------------------------------------------------------


async def test_upstream_that_dies_is_reported_and_recorded(live: Live, marker: Path) -> None:
    code = 7
    async with mcp_client(proxy_args(), gate_env(live.url, UPSTREAM_MARKER=str(marker))) as s:
        async with running(s.call_tool("crash", {"code": code})) as box:
            request = await live.pending("mcp__fixture__crash", code=code)
            await live.decide(request["id"], "approve")
        with pytest.raises(MCPError) as later:
            await s.list_tools()
    assert box[0].is_error
    assert "upstream MCP server 'fixture' closed the connection" in text_of(box[0])
    assert "may or may not have run" in text_of(box[0])
    assert "closed the connection" in later.value.message
    assert ran(marker) == [{"tool": "crash", "args": {"code": code}}]
    assert (await live.request(request["id"]))["outcome"] == "failed"


async def test_upstream_that_does_not_start_stops_the_proxy(live: Live, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gate.cli", "mcp", "proxy", "--name", "broken", "--",
         sys.executable, "-c", "import sys; sys.exit(4)"],
        env={**os.environ, "GATE_URL": live.url},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "gate mcp proxy broken: the upstream MCP server did not start" in proc.stderr


# -- streamable HTTP upstream -----------------------------------------------------------------


async def _http_upstream(tmp_path: Path, marker: Path, token: str) -> tuple[Any, str]:
    port_file = tmp_path / "port"
    proc = await anyio.open_process(
        [*UPSTREAM, "--http", str(port_file)],
        env={**os.environ, "UPSTREAM_MARKER": str(marker), "UPSTREAM_TOKEN": token},
    )
    with anyio.fail_after(30):
        while not port_file.exists() or not port_file.read_text():
            await anyio.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text()}/mcp"


async def test_http_upstream_with_headers_from_the_environment(
    live: Live, marker: Path, tmp_path: Path
) -> None:
    secret = unique("upstream-secret")
    proc, url = await _http_upstream(tmp_path, marker, secret)
    try:
        args = [
            "proxy", "--name", "fixture", "--url", url,
            "--header", "Authorization: Bearer ${FIXTURE_TOKEN}",
        ]  # fmt: skip
        env = gate_env(live.url, FIXTURE_TOKEN=secret)
        async with mcp_client(args, env) as s:
            init = s.initialize_result
            tools = await s.list_tools()
            readme = await s.read_resource("fixture://readme")
            label = unique("http")
            allowed = await s.call_tool("write_marker", {"label": label})
            denied = await s.call_tool("pay_vendor", {"vendor": "EVIL", "amount": 1})
    finally:
        proc.terminate()
        await proc.wait()
        await proc.aclose()
    assert init is not None and init.server_info.name == "upstream-fixture"
    assert "pay_vendor" in [t.name for t in tools.tools]
    assert isinstance(readme.contents[0], types.TextResourceContents)
    assert readme.contents[0].text == "hello from the upstream fixture"
    assert text_of(allowed) == f"wrote {label}"
    assert denied.is_error and "blocked-vendors" in text_of(denied)
    assert ran(marker) == [{"tool": "write_marker", "args": {"label": label}}]


# -- the command line -------------------------------------------------------------------------


#: (arguments after `gate mcp proxy`, environment, what stderr says) for a refused command line
BAD_COMMAND_LINES = [
    (["--name", "a__b", "--", "x"], {}, "--name 'a__b'"),
    (["--name", "ok"], {}, "either as -- COMMAND ARGS... or as --upstream-url URL"),
    (["--name", "ok", "--url", "http://h/mcp", "--", "x"], {}, "either as"),
    (["--name", "ok", "--url", "ftp://h/mcp"], {}, "not an http(s) URL"),
    (["--name", "ok", "--header", "A: b", "--", "x"], {}, "--header is for an HTTP upstream"),
    (
        ["--name", "ok", "--url", "http://h/mcp", "--header", "Authorization: ${NOPE_UNSET}"],
        {},
        "uses ${NOPE_UNSET}, which is not set",
    ),
    (["--name", "ok", "--url", "http://h/mcp", "--header", "no colon"], {}, "'Name: value'"),
    (["--name", "ok", "--", "x"], {"GATE_URL": "localhost:8000"}, "not an http(s) URL"),
]


def test_a_bad_command_line_exits_2_from_the_gate_command() -> None:
    """The real `gate` process: exit code 2 and the fix on stderr, no traceback; every case
    is checked in-process below."""
    args, env, says = BAD_COMMAND_LINES[0]
    base = {k: v for k, v in os.environ.items() if not k.startswith("GATE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "gate.cli", "mcp", "proxy", *args],
        env={**base, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "env", "says"), BAD_COMMAND_LINES)
def test_bad_command_lines_are_refused_with_the_fix(
    args: list[str],
    env: dict[str, str],
    says: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # In this process: what `gate mcp proxy` runs after its (token-sealing) start, without
    # starting a process that imports the MCP SDK for each case.
    for name in [k for k in os.environ if k.startswith("GATE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ns = mcp_parser().parse_args(["proxy", *args])  # reads $GATE_URL
    assert run_proxy(ns) == 2
    assert says in capsys.readouterr().err


# -- the gate restarts mid-wait ---------------------------------------------------------------


async def test_a_gate_restart_mid_wait_is_survived(tmp_path: Path, marker: Path) -> None:
    own = start_gate(tmp_path)
    try:
        vendor = unique("restart")
        async with mcp_client(proxy_args(), gate_env(own.url, UPSTREAM_MARKER=str(marker))) as s:
            async with running(s.call_tool("pay_vendor", {"vendor": vendor, "amount": 8})) as box:
                request = await own.pending(PAY, vendor=vendor)
                await own.long_polled()
                own.server.kill()  # SIGKILL: the long-poll drops mid-wait
                own.server.start()  # same port, same database
                await own.decide(request["id"], "approve")
        assert text_of(box[0]) == f"paid {vendor} 8"
        assert ran(marker) == [{"tool": "pay_vendor", "args": {"vendor": vendor, "amount": 8}}]
        assert (await own.request(request["id"]))["outcome"] == "ran"
    finally:
        own.server.stop()
