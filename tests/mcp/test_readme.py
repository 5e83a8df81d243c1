"""The docs' "MCP clients" page is exact: its configs run, parse and agree with each other."""

from __future__ import annotations

import fnmatch
import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from gate.mcp import _parser
from gate.mcp.proxy import check
from gate.mcp.tasks import POLL_MS
from tests.mcp.conftest import Live, unique
from tests.support import config as cfg
from tests.support import docs

GATE = str(Path(sys.executable).parent / "gate")  # the console script the configs name


def section() -> str:
    return docs.section("mcp")


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", section(), re.S)


def configs() -> list[dict[str, Any]]:
    return [json.loads(b) for b in blocks("json")]


def servers(config: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = config.get("mcpServers") or config["servers"]
    return found


async def test_the_permission_prompt_config_runs_as_written(live: Live) -> None:
    config = configs()[0]
    (name, entry), *_ = servers(config).items()
    command = " ".join(blocks("bash")[0].split())
    assert f"--permission-prompt-tool mcp__{name}__approve" in command
    assert "--mcp-config gate-mcp.json" in command
    assert entry["command"] == "gate" and entry["args"][:2] == ["mcp", "prompt"]
    env = {**entry["env"], "GATE_URL": live.url, "GATE_TOKEN": cfg.AGENT}
    params = StdioServerParameters(command=GATE, args=entry["args"], env=env)
    tool_input = {"path": unique("/srv/readme")}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        result = await s.call_tool("approve", {"tool_name": "read_file", "input": tool_input})
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    assert json.loads(first.text) == {"behavior": "allow", "updatedInput": tool_input}


def test_the_agent_sdk_example_names_the_same_tool() -> None:
    (example,) = blocks("python")
    assert 'permission_prompt_tool_name="mcp__gate__approve"' in example
    assert '"args": ["mcp", "prompt"]' in example


@pytest.mark.parametrize("index", [1, 2, 3])
def test_each_client_config_is_a_proxy_command_gate_accepts(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = configs()[index]
    ((name, entry),) = servers(config).items()
    assert entry["command"] == "gate"
    args = entry["args"]
    assert args[:2] == ["mcp", "proxy"]
    ns = _parser().parse_args(args[1:])
    assert ns.name == name  # the client's own name for the server is the NAME in mcp__NAME__
    for key, value in entry["env"].items():
        monkeypatch.setenv(key, value)
    check(ns)  # raises ProxyError naming the problem
    assert "GATE_TOKEN" in entry["env"] and "GATE_URL" in entry["env"]


def test_the_rule_example_covers_the_vs_code_server() -> None:
    rule_block = blocks("toml")[0]
    rules = tomllib.loads(rule_block)["rules"]
    (name,) = servers(configs()[3])
    assert all(t.startswith(f"mcp__{name}__") for t in rules[0]["tools"])


def test_the_long_approval_example_waits_as_long_as_its_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The "Long approvals" setup: the proxy's --timeout is the rule's, and it covers the tool."""
    config = configs()[4]
    ((name, entry),) = servers(config).items()
    ns = _parser().parse_args(entry["args"][1:])
    for key, value in entry["env"].items():
        monkeypatch.setenv(key, value)
    check(ns)
    (rule,) = tomllib.loads(blocks("toml")[1])["rules"]
    assert rule["timeout"] == "30m" and ns.timeout == 30 * 60
    assert all(t.startswith(f"mcp__{name}__") for t in rule["tools"])
    task_call, created = configs()[5], configs()[6]
    assert task_call["params"]["task"]["ttl"] == created["result"]["task"]["ttl"]
    assert fnmatch.fnmatch(f"mcp__{name}__{task_call['params']['name']}", rule["tools"][0])
    assert created["result"]["task"]["pollInterval"] == POLL_MS
