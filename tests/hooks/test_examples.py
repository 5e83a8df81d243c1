"""Every file in examples/ runs against a live gate, so none of them rots (the LangGraph and
OpenAI Agents ones inside their frameworks: test_integrations.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import Gate
from tests.hooks.conftest import FIXTURES, Live, fixture
from tests.support import config as cfg

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the interpreter path the example settings show (what `gate init` writes, on some machine)
EXAMPLE_PYTHON = "/opt/gate/.venv/bin/python"


def as_process(command: str) -> list[str]:
    """The example's shell command, run by this interpreter (`gate` as `python -m gate.cli`)."""
    argv = shlex.split(command)
    if argv[0] == EXAMPLE_PYTHON:
        return [sys.executable, *argv[1:]]
    assert argv[0] == "gate"
    return [sys.executable, "-m", "gate.cli", *argv[1:]]


def test_claude_code_settings_snippet(live: Live) -> None:
    settings = json.loads((EXAMPLES / "claude-code" / "settings.json").read_text())
    entry = settings["hooks"]["PreToolUse"][0]
    handler = entry["hooks"][0]
    argv = as_process(handler["command"])
    hook_timeout = float(argv[argv.index("--timeout") + 1])
    # Claude Code kills the hook at `timeout` and then lets the call through: the hook's own
    # deadline must come first, with room to withdraw the request and answer.
    assert handler["type"] == "command"
    assert handler["timeout"] >= hook_timeout + 30
    matcher = re.compile(entry["matcher"])  # unanchored, like Claude Code's JavaScript regex
    # derived from examples/gate.toml (gate init): every tool its rules name reaches gate
    for tool in ("Bash", "Write", "Edit", "mcp__github__create_issue", "WebFetch"):
        assert matcher.search(tool)
    assert not matcher.search("Read")

    payload = fixture("bash", session_id=str(uuid.uuid4()), tool_input={"command": "rm -r a"})
    env = {**os.environ, "GATE_URL": live.url, "GATE_TOKEN": cfg.AGENT}
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(payload))
    proc.stdin.close()
    proc.stdin = None  # so communicate() does not touch the closed pipe
    request = live.wait_pending("Bash", payload["session_id"])
    live.decide(request["id"], cfg.ALICE, "approve")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_claude_code_post_tool_and_session_end_entries(live: Live) -> None:
    settings = json.loads((EXAMPLES / "claude-code" / "settings.json").read_text())
    hooks = settings["hooks"]
    assert hooks["PostToolUse"][0]["matcher"] == hooks["PreToolUse"][0]["matcher"]
    env = {**os.environ, "GATE_URL": live.url, "GATE_TOKEN": cfg.AGENT}

    def run(event: str, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        handler = hooks[event][0]["hooks"][0]
        assert handler["type"] == "command"
        argv = as_process(handler["command"])
        return subprocess.run(
            argv, input=json.dumps(payload), capture_output=True, text=True, env=env, timeout=60
        )

    session = str(uuid.uuid4())
    pre = fixture("bash", session_id=session, tool_input={"command": "rm -r dist"})
    pre["tool_use_id"] = f"toolu_{uuid.uuid4().hex[:24]}"
    hook = live.hook().send(pre)
    request = live.wait_pending("Bash", session)
    live.decide(request["id"], cfg.ALICE, "approve")
    assert hook.json()[1]["hookSpecificOutput"]["permissionDecision"] == "allow"
    post = {**pre, "hook_event_name": "PostToolUse", "tool_response": {"stdout": "", "stderr": ""}}
    recorded = run("PostToolUse", post)
    assert (recorded.returncode, recorded.stdout) == (0, "")
    with live.api() as c:
        assert c.get(f"/v1/requests/{request['id']}").json()["outcome"] == "ran"

    waiting = live.hook().send({**pre, "tool_use_id": f"toolu_{uuid.uuid4().hex[:24]}"})
    pending = live.wait_pending("Bash", session)
    end = {"session_id": session, "cwd": "/p", "hook_event_name": "SessionEnd", "reason": "other"}
    done = run("SessionEnd", end)
    assert (done.returncode, done.stdout) == (0, "")
    assert waiting.json()[1]["hookSpecificOutput"]["permissionDecision"] == "deny"
    with live.api() as c:
        assert c.get(f"/v1/requests/{pending['id']}").json()["status"] == "cancelled"


def test_codex_hooks_example(live: Live) -> None:
    hooks = json.loads((EXAMPLES / "codex" / "hooks.json").read_text())["hooks"]
    handler = hooks["PreToolUse"][0]["hooks"][0]
    argv = as_process(handler["command"])
    assert handler["timeout"] >= float(argv[argv.index("--timeout") + 1]) + 30
    assert sorted(hooks) == ["PostToolUse", "PreToolUse"]  # Codex has no SessionEnd
    payload = json.loads((FIXTURES / "codex_pretooluse_mcp.json").read_text())
    payload["tool_input"] = {"query": "DROP TABLE profiles"}

    done = subprocess.run(
        argv,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env={**os.environ, "GATE_URL": live.url, "GATE_TOKEN": cfg.AGENT},
        timeout=60,
    )

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("gate: Blocked by rule 'no-ddl'")


def test_command_hook_entry(live: Live) -> None:
    entry = json.loads((EXAMPLES / "command-hook.json").read_text())["hooks"]["tool.pre"][0]
    argv = as_process(entry["command"])
    assert entry["timeoutMs"] >= 1000 * (float(argv[argv.index("--timeout") + 1]) + 30)
    env = {**os.environ, "GATE_URL": live.url, "GATE_TOKEN": cfg.AGENT}

    denied = subprocess.run(
        argv,
        input=json.dumps(
            {"event": "tool.pre", "toolName": "db_write", "toolInput": {"env": "prod"}}
        ),
        capture_output=True,
        text=True,
        env=env,
    )
    allowed = subprocess.run(
        argv,
        input=json.dumps({"event": "tool.pre", "toolName": "read_notes", "toolInput": {}}),
        capture_output=True,
        text=True,
        env=env,
    )

    assert denied.returncode == 2
    assert "No writes to prod from agents" in denied.stderr
    assert json.loads(denied.stdout)["continue"] is False
    assert (allowed.returncode, json.loads(allowed.stdout)["continue"]) == (0, True)


def test_node_tool_call_hook(gate_sqlite: Gate) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the JavaScript example runs under `node --test`")
    env = {
        **os.environ,
        "GATE_URL": gate_sqlite.url,
        "GATE_TOKEN": cfg.AGENT,
        "GATE_APPROVER_TOKEN": cfg.ALICE,
    }
    result = subprocess.run(
        [node, "--test", str(EXAMPLES / "js" / "gate-hook.test.mjs")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "# fail 0" in result.stdout
