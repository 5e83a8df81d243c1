"""The agent token of `gate mcp` is out of reach of the upstream it starts.

The upstream fixture's `peek` tool reports everything it can read of its own environment and
its parent's (`/proc/<ppid>/environ`, `/proc/<ppid>/maps`). A hostile upstream runs as the
same user as the proxy: the token must be in none of it. The proxy re-executes itself
without `$GATE_TOKEN` before it starts anything (so its `/proc/<pid>/environ` never holds
it), and makes itself non-dumpable (so an upstream without ptrace privileges cannot read its
`/proc` files or memory at all). Calls still reach gate with the token (a refused token
would refuse them).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import mcp.types as types
import pytest
import pytest_asyncio
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.mcp.conftest import (
    PROMPT,
    SHARED_LOOP,
    UPSTREAM,
    Live,
    Shared,
    gate_env,
    mcp_client,
    pid_of,
    shared_session,
    unique,
)
from tests.mcp.test_prompt import approve_call
from tests.support import config as cfg

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: an upstream started without any capability (as root in a container usually is not, and
#: as any other user is): the non-dumpable proxy's /proc files are closed to it
UNPRIVILEGED = ["setpriv", "--inh-caps", "-all", "--bounding-set", "-all", "--ambient-caps", "-all"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tagged_proxy(
    live: Live, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Shared, str]]:
    """One `gate mcp proxy` whose command line holds a tag no other process has, for the
    tests marked SHARED_LOOP that only call it or read its /proc files."""
    tag = unique("tag")
    args = ["proxy", "--name", "fixture", "--metadata", f"test={tag}", "--", *UPSTREAM]
    async with shared_session(args, live.url, tmp_path_factory.mktemp("proxy")) as shared:
        yield shared, tag


def held_environment(tag: str) -> bytes:
    """What any process of the user (the test, as their peer) reads of the environment of
    the gate mcp process tagged `tag`."""
    environ = Path(f"/proc/{pid_of(f'test={tag}')}/environ")
    try:
        return environ.read_bytes()
    except PermissionError:
        return b""  # non-dumpable, and this test is not privileged: nothing to read


@SHARED_LOOP
async def test_the_upstream_finds_no_token_in_its_parents_environment(
    live: Live, tagged_proxy: tuple[Shared, str]
) -> None:
    turn = tagged_proxy[0].turn()
    result = await turn.session.call_tool("peek", {})
    assert not result.is_error, result
    text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert cfg.AGENT not in text
    seen = json.loads(text)
    assert turn.ran() == [{"tool": "peek", "args": {}}]  # gate answered: the token was sent
    assert "gate.cli mcp proxy" in seen["parent_cmdline"]  # the parent is the proxy
    assert "GATE_TOKEN" not in seen["own_env"] and "GATE_TOKEN" not in seen["own_environ"]
    # Here the upstream may read its parent's /proc (root with every capability can read any
    # process's): what it finds is an environment that never held the token.
    if not seen["parent_environ"].startswith("unreadable"):
        assert f"GATE_URL={live.url}" in seen["parent_environ"]
        assert "GATE_TOKEN" not in seen["parent_environ"]


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="needs setpriv")
async def test_an_upstream_without_privileges_cannot_read_the_proxy_at_all(
    live: Live, tmp_path: Path
) -> None:
    # As root, the client, proxy and upstream all run without capabilities (as any other
    # user's processes do): then only the proxy being non-dumpable keeps the upstream out.
    marker = tmp_path / "ran.jsonl"
    drop = UNPRIVILEGED if os.geteuid() == 0 else []
    command = [*drop, sys.executable, "-m", "gate.cli", "mcp", "proxy", "--name", "fixture"]
    params = StdioServerParameters(
        command=command[0],
        args=[*command[1:], "--", *UPSTREAM],
        env=gate_env(live.url, UPSTREAM_MARKER=str(marker)),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        with anyio.fail_after(60):
            await s.initialize()
        result = await s.call_tool("peek", {})
    text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert not result.is_error and cfg.AGENT not in text
    seen = json.loads(text)
    assert "gate.cli mcp proxy" in seen["parent_cmdline"]
    assert seen["parent_environ"] == "unreadable: PermissionError"  # non-dumpable
    assert seen["parent_maps"] == "unreadable: PermissionError"


@SHARED_LOOP
async def test_gate_mcp_proxy_holds_no_token_in_its_own_environment(
    tagged_proxy: tuple[Shared, str],
) -> None:
    held = held_environment(tagged_proxy[1])
    assert cfg.AGENT.encode() not in held and b"GATE_TOKEN=" not in held


async def test_gate_mcp_prompt_holds_no_token_in_its_own_environment(live: Live) -> None:
    tag = unique("tag")
    async with mcp_client([*PROMPT, "--metadata", f"test={tag}"], gate_env(live.url)) as s:
        held = held_environment(tag)
        body = await approve_call(s, {"tool_name": "read_config", "input": {"p": tag}})
        assert body["behavior"] == "allow"  # gate accepted the token it kept
    assert cfg.AGENT.encode() not in held and b"GATE_TOKEN=" not in held
