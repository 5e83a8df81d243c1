"""Every call a rule names reaches gate: the hook's matcher comes from the rules, and gate says
when an installed one does not send a tool a rule names.

`gate init` derives the PreToolUse matcher from gate.toml (`--matcher` overrides it, no
gate.toml means every tool); a re-run widens a matcher of gate's own that no longer sends what
the rules name; `gate policy check` and `gate serve` name the rule, the tool and the settings
file whose matcher never sends it. The matchers written are also run through JavaScript's
regex engine (Claude Code's), where node is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gate.policy.matchers import derive, sends
from tests.hooks.test_init import gate_init
from tests.support import config as cfg
from tests.support.cli import gate_in_process
from tests.support.databases import migrated_sqlite
from tests.support.servers import ServerProcess, wait_until

HOOK = f"{sys.executable} -m gate.hook --format claude-code --timeout 540"


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    return home, project


def policy(path: Path, *tools: list[str]) -> Path:
    """A gate.toml at `path` with one ask rule per list of tools."""
    data = cfg.settings_data(migrated_sqlite(path.parent / "gate.db"))
    data["rules"] = [
        {"name": f"r{i}", "tools": globs, "timeout": "10m"} for i, globs in enumerate(tools)
    ]
    path.write_text(cfg.to_toml(data))
    return path


def pre_tool_matchers(path: Path) -> list[Any]:
    return [group.get("matcher") for group in json.loads(path.read_text())["hooks"]["PreToolUse"]]


@pytest.mark.parametrize(
    ("tools", "claude", "codex"),
    [
        ([["Bash"], ["Read", "Grep"]], "Bash|Read|Grep", "Bash|Read|Grep"),
        (
            [["Bash"], ["WebFetch"], ["mcp__github__*"]],
            "^(?:Bash|WebFetch|mcp__github__.*)$",
            "^(?:Bash|WebFetch|mcp__github__.*)$",
        ),
        ([["Bash"], ["*"]], "*", ".*"),  # a rule on any tool: every tool
        ([["Bash"], ["[Bb]ash"]], "*", ".*"),  # a glob a matcher cannot say: every tool
        ([["functions.echo"], ["my-tool?"]], r"^(?:functions\.echo|my-tool.)$", None),
    ],
)
def test_init_sends_the_hook_the_tools_the_rules_name(
    dirs: tuple[Path, Path], tools: list[list[str]], claude: str, codex: str | None
) -> None:
    home, project = dirs
    config = policy(project / "gate.toml", *tools)

    done = gate_init("claude-code", "--no-check", home=home, cwd=project)
    assert done.returncode == 0, done.stderr
    assert f"PreToolUse matcher {claude!r}: the tools the {len(tools)} rule(s) in" in done.stdout
    assert pre_tool_matchers(project / ".claude" / "settings.json") == [claude]
    if codex is not None:
        env = {"PATH": "/usr/bin:/bin"}
        done = gate_init("codex", "--no-check", "-c", str(config), home=home, cwd=home, env=env)
        assert done.returncode == 0, done.stderr
        assert pre_tool_matchers(home / ".codex" / "hooks.json") == [codex]


def test_matcher_option_and_no_policy(dirs: tuple[Path, Path]) -> None:
    home, project = dirs

    chosen = gate_init(
        "claude-code", "--no-check", "--matcher", "Bash|Task", home=home, cwd=project
    )
    settings = project / ".claude" / "settings.json"
    assert chosen.returncode == 0, chosen.stderr
    assert pre_tool_matchers(settings) == ["Bash|Task"]
    assert "PreToolUse matcher 'Bash|Task', as --matcher says." in chosen.stdout

    settings.unlink()
    bare = gate_init("claude-code", "--no-check", home=home, cwd=project)
    assert bare.returncode == 0, bare.stderr
    assert pre_tool_matchers(settings) == ["*"]
    assert "No gate.toml here" in bare.stdout and "every tool" in bare.stdout

    empty = gate_init("claude-code", "--no-check", "--matcher", " ", home=home, cwd=project)
    assert empty.returncode == 1 and "--matcher is empty" in empty.stderr

    broken = project / "broken.toml"
    broken.write_text("[[rules]\n")
    bad = gate_init("claude-code", "--no-check", "-c", str(broken), home=home, cwd=project)
    assert bad.returncode == 1 and "cannot read the rules" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_rerun_widens_gates_own_matcher_but_not_a_shared_one(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"type": "command", "command": "~/bin/lint.sh"}
    settings.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": "Bash", "hooks": [{"type": "command", "command": HOOK}]}
                    ],
                    "PostToolUse": [
                        {"matcher": "Bash", "hooks": [mine, {"type": "command", "command": HOOK}]}
                    ],
                }
            }
        )
    )
    policy(project / "gate.toml", ["Bash"], ["WebFetch"])

    first = gate_init("claude-code", "--no-check", home=home, cwd=project)
    again = gate_init("claude-code", "--no-check", home=home, cwd=project)

    assert first.returncode == 0, first.stderr
    pre = next(line for line in first.stdout.splitlines() if "PreToolUse: " in line)
    assert pre.endswith("; matcher now 'Bash|WebFetch'")
    post = next(line for line in first.stdout.splitlines() if "PostToolUse: " in line)
    assert "matcher now" not in post
    hooks = json.loads(settings.read_text())["hooks"]
    assert hooks["PreToolUse"][0]["matcher"] == "Bash|WebFetch"
    assert hooks["PostToolUse"][0]["matcher"] == "Bash"  # shared with the user's own hook
    assert hooks["PostToolUse"][0]["hooks"][0] == mine
    assert "matcher now" not in again.stdout


def check(
    *args: str, home: Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`gate policy check ARGS` (in this process) with HOME of the test's own and no GATE_* or
    CODEX_* variable of the test's environment."""
    unset = [k for k in os.environ if k.startswith(("GATE_", "CODEX_"))]
    env = {"HOME": str(home), **(env or {})}
    return gate_in_process("policy", "check", *args, cwd=cwd, env=env, unset=unset)


def test_policy_check_names_the_rule_and_the_file_that_never_sends_its_tool(
    dirs: tuple[Path, Path],
) -> None:
    home, project = dirs
    config = policy(project / "gate.toml", ["Bash"])
    assert gate_init("claude-code", "--no-check", home=home, cwd=project).returncode == 0
    codex_home = home / "codex"
    env = {"PATH": "/usr/bin:/bin", "CODEX_HOME": str(codex_home)}
    scope = ("--scope", "user", "-c", str(config))
    assert gate_init("codex", "--no-check", *scope, home=home, cwd=project, env=env).returncode == 0
    assert check(home=home, cwd=project).stderr == ""  # both send Bash

    policy(config, ["Bash"], ["WebFetch"], ["*"])
    done = check(home=home, cwd=project, env={"CODEX_HOME": str(codex_home)})

    assert done.returncode == 0  # a warning, not an error: the policy itself is sound
    claude_file = project / ".claude" / "settings.json"
    assert (
        f"rule 'r1' names 'WebFetch', but the claude-code hook's PreToolUse matcher "
        f"('Bash' in {claude_file}) never sends it to gate" in done.stderr
    )
    assert "rule 'r2' names any tool (e.g. 'x')" in done.stderr
    assert f"codex hook's PreToolUse matcher ('Bash' in {codex_home / 'hooks.json'})" in done.stderr
    assert "run `gate init claude-code` again" in done.stderr

    fixed = gate_init("claude-code", "--no-check", home=home, cwd=project)
    assert fixed.returncode == 0 and pre_tool_matchers(claude_file) == ["*"]
    after = check(home=home, cwd=project, env={"CODEX_HOME": str(codex_home)})
    assert "claude-code hook" not in after.stderr and "codex hook" in after.stderr


def test_serve_warns_in_its_log(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    config = policy(project / "gate.toml", ["Bash"], ["Task"])
    user = home / ".claude" / "settings.json"
    user.parent.mkdir()
    user.write_text(
        json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": HOOK}]}]}})
    )
    data = json.loads(json.dumps(cfg.settings_data(migrated_sqlite(project / "gate.db"))))
    data["server"]["migrate_on_start"] = True
    data["rules"] = [{"name": "agents", "tools": ["Task"], "timeout": "10m"}]
    config.write_text(cfg.to_toml(data))
    server = ServerProcess(config, env={"HOME": str(home)}).start()
    try:
        wait_until(lambda: "rule 'agents' names 'Task'" in server.log(), timeout=15)
    finally:
        server.stop()
    line = next(x for x in server.log().splitlines() if "rule 'agents' names 'Task'" in x)
    assert " WARNING " in line and str(user) in line


NAMES = ["Bash", "BashOutput", "Write", "WebFetch", "mcp__github__create_pr", "mcp__gitlab__x",
         "functions.echo", "functionsXecho", "my-tool1", "Read"]  # fmt: skip


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize(
    "globs",
    [["Bash", "Write"], ["Bash", "mcp__github__*"], ["functions.echo", "my-tool?"], ["Web*"]],
)
def test_the_derived_matcher_sends_what_the_rules_match_in_javascript(globs: list[str]) -> None:
    import fnmatch

    matcher = derive(globs, "claude-code")
    script = (
        "const [m, names] = JSON.parse(process.argv[1]);"
        "const exact = /^[A-Za-z0-9_\\-, |]*$/.test(m);"
        "console.log(JSON.stringify(names.map(n => exact ? m.split(/[|,]/).includes(n)"
        " : new RegExp(m).test(n))));"
    )
    out = subprocess.run(
        ["node", "-e", script, json.dumps([matcher, NAMES])],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    in_javascript = json.loads(out)
    wanted = [any(fnmatch.fnmatchcase(n, g) for g in globs) for n in NAMES]
    assert in_javascript == wanted, matcher
    assert [sends(matcher, "claude-code", n) for n in NAMES] == wanted
