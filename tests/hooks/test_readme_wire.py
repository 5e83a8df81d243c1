"""The docs' agent pages ("Wire it into your agent") are true: its gate.toml is valid and does
what the text says, and its commands exist."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support import docs
from tests.support.cli import gate_in_process


def wire() -> str:
    return docs.section("wire")


def gate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`gate ARGS` in this process: what the page's commands say and exit with (the `gate`
    process itself, per command family, is tests/policy's and test_init.py's to run)."""
    return gate_in_process(*args, stdin=stdin)


def test_the_starter_gate_toml_gates_risky_bash(tmp_path: Path) -> None:
    (block,) = re.findall(r"```toml\n(.*?)```", wire(), re.S)
    config = tmp_path / "gate.toml"
    config.write_text(block)

    check = gate("policy", "check", "--config", str(config))

    assert check.returncode == 0, check.stderr
    for command, decision in [
        ("rm -rf build/", "ask"),
        ("git push origin main", "ask"),
        ("ls -la", "allow"),  # no rule: the hook defers to Claude Code's own permissions
    ]:
        call = {"tool_name": "Bash", "tool_args": {"command": command}}
        explained = gate("policy", "explain", "--config", str(config), "-", stdin=json.dumps(call))
        assert explained.returncode == 0, explained.stderr
        assert json.loads(explained.stdout)["decision"] == decision, command


@pytest.mark.parametrize("line", ["gate init claude-code", "gate init codex"])
def test_the_init_commands_exist(line: str) -> None:
    assert line in wire()

    done = gate(*shlex.split(line)[1:], "--help")

    assert done.returncode == 0, done.stderr
    for flag in ("--scope", "--url", "--token-env", "--timeout", "--no-check"):
        assert flag in done.stdout
