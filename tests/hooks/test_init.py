"""`gate init claude-code | codex`: the CLI in a temporary HOME and project, a real gate to
check against, and the hook it wrote run the way the agent runs it (by shell, with no `gate`
on PATH)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from gate.config.settings import Settings
from tests.conftest import GateFactory
from tests.hooks.conftest import Live, fixture
from tests.support import config as cfg
from tests.support.cli import gate_in_process, run_gate
from tests.support.servers import free_port

CLAUDE_EVENTS = ["PreToolUse", "PostToolUse", "SessionEnd"]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: the matcher derived from examples/gate.toml's rules (the same for both runtimes)
EXAMPLE_MATCHER = (
    "^(?:Bash|Write|Edit|apply_patch|mcp__github__create_.*|mcp__github__merge_.*"
    "|mcp__github__push_.*|WebFetch)$"
)


def gate_init(
    *args: str, home: Path, cwd: Path, env: dict[str, str] | None = None, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """`gate init ARGS` with HOME of the test's own and no GATE_* or CODEX_* variable of the
    test's environment: called in this process, or with `process` run as a user would (a real
    `gate` process)."""
    unset = [k for k in os.environ if k.startswith(("GATE_", "CODEX_"))]
    run = run_gate if process else gate_in_process
    return run("init", *args, cwd=cwd, env={"HOME": str(home), **(env or {})}, unset=unset)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    return home, project


def handlers(settings: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [h for group in settings["hooks"][event] for h in group["hooks"]]


def run_as_agent(command: str, payload: dict[str, Any], token: str) -> subprocess.Popen[str]:
    """Run a hook command the way Claude Code and Codex do: through a shell, and here with a
    PATH that holds no `gate`, so only an absolute path can work."""
    env = {"PATH": "/usr/bin:/bin", "GATE_TOKEN": token, "HOME": "/nonexistent"}
    proc = subprocess.Popen(
        ["/bin/sh", "-c", command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(payload))
    proc.stdin.close()
    proc.stdin = None
    return proc


# -- Claude Code --------------------------------------------------------------------------------


def test_project_settings_hold_an_absolute_hook_that_works_without_gate_on_path(
    live: Live, dirs: tuple[Path, Path]
) -> None:
    home, project = dirs

    # the real command, as a user runs it
    done = gate_init(
        "claude-code",
        "--url",
        live.url,
        home=home,
        cwd=project,
        env={"GATE_TOKEN": cfg.AGENT},
        process=True,
    )

    path = project / ".claude" / "settings.json"
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{path}:\n  PreToolUse: added {sys.executable} -m gate.hook")
    assert f"checked: {live.url} answers and accepts the token in $GATE_TOKEN" in done.stdout
    settings = json.loads(path.read_text())
    assert sorted(settings["hooks"]) == sorted(CLAUDE_EVENTS)
    (pre,) = handlers(settings, "PreToolUse")
    assert pre["command"].startswith(f"{sys.executable} -m gate.hook --format claude-code")
    assert pre["timeout"] == 600 and "--timeout 540" in pre["command"]
    assert cfg.AGENT not in path.read_text()  # the token stays in the environment
    assert not (home / ".claude").exists()

    payload = fixture("bash", session_id=str(uuid.uuid4()), tool_input={"command": "rm -r x"})
    proc = run_as_agent(pre["command"], payload, cfg.AGENT)
    request = live.wait_pending("Bash", payload["session_id"])
    live.decide(request["id"], cfg.ALICE, "approve")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"


def test_user_scope_merges_into_existing_settings_and_a_rerun_changes_nothing(
    live: Live, dirs: tuple[Path, Path]
) -> None:
    home, project = dirs
    path = home / ".claude" / "settings.json"
    path.parent.mkdir()
    mine = {"type": "command", "command": "~/bin/lint-bash.sh", "timeout": 5}
    before = {
        "model": "opus",
        "permissions": {"allow": ["Bash(npm test)"], "deny": ["Read(./.env)"]},
        "env": {"FOO": "1"},
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [mine]},
                # A bare `gate hook` (exits 127 when gate is not on PATH): replaced in place.
                {
                    "matcher": "Bash|Write",
                    "hooks": [{"type": "command", "command": "gate hook", "statusMessage": "mine"}],
                },
            ],
            "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
        },
    }
    path.write_text(json.dumps(before, indent=4))
    os.chmod(path, 0o600)
    env = {"GATE_URL": live.url, "GATE_TOKEN": cfg.AGENT}

    first = gate_init("claude-code", "--scope", "user", home=home, cwd=project, env=env)
    after = json.loads(path.read_text())
    written = path.read_text()
    again = gate_init("claude-code", "--scope", "user", home=home, cwd=project, env=env)

    assert first.returncode == 0, first.stderr
    assert "PreToolUse: updated 1 gate hook(s) to " in first.stdout
    assert {k: after[k] for k in ("model", "permissions", "env")} == {
        k: before[k] for k in ("model", "permissions", "env")
    }
    assert after["hooks"]["Stop"] == before["hooks"]["Stop"]
    groups = after["hooks"]["PreToolUse"]
    assert groups[0] == {"matcher": "Bash", "hooks": [mine]}
    assert groups[1]["matcher"] == "Bash|Write"  # the user's matcher is theirs
    assert groups[1]["hooks"][0]["statusMessage"] == "Waiting for approval in gate..."
    assert groups[1]["hooks"][0]["command"].startswith(f"{sys.executable} -m gate.hook")
    assert f"--url {live.url}" in groups[1]["hooks"][0]["command"]
    assert len(groups) == 2
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert again.returncode == 0
    assert again.stdout.count("unchanged") == 3
    assert path.read_text() == written


def test_a_settings_file_it_cannot_read_is_left_alone(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    path = project / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"hooks": {"PreToolUse": [}')  # a half-edited file

    done = gate_init("claude-code", "--no-check", home=home, cwd=project)

    assert done.returncode == 1
    assert done.stderr.startswith(f"gate init claude-code: cannot read {path}: ")
    assert "fix or move it, then run this again" in done.stderr
    assert path.read_text() == '{"hooks": {"PreToolUse": [}'


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (None, "$GATE_TOKEN is not set (HTTP 401"),
        ("wrong", "the token in $GATE_TOKEN is not accepted (HTTP 401"),
        (cfg.ALICE, "the token in $GATE_TOKEN is not an agent token (HTTP 403"),
    ],
    ids=["missing", "wrong", "approver"],
)
def test_a_token_the_server_refuses_is_reported(
    live: Live, dirs: tuple[Path, Path], token: str | None, says: str
) -> None:
    home, project = dirs
    env = {"GATE_TOKEN": token} if token else {}

    done = gate_init("claude-code", "--url", live.url, home=home, cwd=project, env=env)

    assert done.returncode == 1
    assert says in done.stderr
    assert "The hook is installed and fails closed" in done.stderr
    assert (project / ".claude" / "settings.json").exists()


def test_a_token_less_server_is_reported_as_needing_no_token(
    make_gate: GateFactory, sqlite_url: str, dirs: tuple[Path, Path]
) -> None:
    """Local mode takes no token: init must not claim one was sent and accepted."""
    home, project = dirs
    data = cfg.settings_data(sqlite_url)
    data["tokens"] = []
    local = make_gate(settings=Settings(**data))

    done = gate_init("claude-code", "--url", local.url, home=home, cwd=project)

    assert done.returncode == 0, done.stderr
    assert f"checked: {local.url} answers and needs no token (local mode" in done.stdout
    assert "accepts the token" not in done.stdout


def test_a_server_that_does_not_answer_is_reported(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    url = f"http://127.0.0.1:{free_port()}"

    done = gate_init("claude-code", "--url", url, home=home, cwd=project)

    assert done.returncode == 1
    assert f"{url} does not answer as a gate server (no answer from /healthz)" in done.stderr


def test_a_custom_token_variable_is_what_the_hook_reads(
    live: Live, dirs: tuple[Path, Path]
) -> None:
    home, project = dirs
    env = {"BILLING_GATE_TOKEN": cfg.AGENT}

    done = gate_init(
        "claude-code",
        "--url",
        live.url,
        "--token-env",
        "BILLING_GATE_TOKEN",
        home=home,
        cwd=project,
        env=env,
    )

    assert done.returncode == 0, done.stderr
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    (pre,) = handlers(settings, "PreToolUse")
    assert "--token-env BILLING_GATE_TOKEN" in pre["command"]
    payload = fixture("bash", session_id=str(uuid.uuid4()), tool_input={"command": "rm -r y"})
    proc = run_as_agent(
        pre["command"].replace("BILLING_GATE_TOKEN", "NO_SUCH_VARIABLE"), payload, cfg.AGENT
    )
    out, _ = proc.communicate(timeout=60)
    # GATE_TOKEN alone is not read when the hook was told another variable.
    assert "no token was sent" in json.loads(out)["hookSpecificOutput"]["permissionDecisionReason"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--timeout", "0"], "--timeout must be more than 0 seconds"),
        (["--token-env", "GATE TOKEN"], "--token-env 'GATE TOKEN' is not an environment"),
        (["--url", "gate.local:8000"], "--url 'gate.local:8000' is not an http(s) URL"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    dirs: tuple[Path, Path], args: list[str], says: str
) -> None:
    home, project = dirs

    done = gate_init("claude-code", *args, home=home, cwd=project)

    assert done.returncode == 1
    assert says in done.stderr
    assert not (project / ".claude").exists()


# -- Codex --------------------------------------------------------------------------------------


def fake_codex(bin_dir: Path, version: str) -> dict[str, str]:
    """A `codex` on PATH that reports `version` (gate init reads it)."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "codex"
    script.write_text(f'#!/bin/sh\necho "codex-cli {version}"\n')
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_codex_hooks_json_with_edits_for_a_codex_that_applies_them(
    live: Live, dirs: tuple[Path, Path]
) -> None:
    home, project = dirs
    codex_home = home / "codex-home"
    env = {**fake_codex(home / "bin", "0.144.0"), "CODEX_HOME": str(codex_home)}
    env["GATE_TOKEN"] = cfg.AGENT

    config = str(EXAMPLES / "gate.toml")
    done = gate_init(
        "codex", "--scope", "user", "--url", live.url, "-c", config, home=home, cwd=project, env=env
    )

    path = codex_home / "hooks.json"
    assert done.returncode == 0, done.stderr
    assert "Codex 0.144.0: approvers' edits reach Codex as updatedInput." in done.stdout
    assert "review it in /hooks" in done.stdout
    written = json.loads(path.read_text())
    assert sorted(written) == ["hooks"]  # Codex refuses unknown top-level keys
    assert sorted(written["hooks"]) == ["PostToolUse", "PreToolUse"]
    (pre,) = handlers(written, "PreToolUse")
    assert written["hooks"]["PreToolUse"][0]["matcher"] == EXAMPLE_MATCHER
    assert pre["type"] == "command" and pre["timeout"] == 600
    assert pre["command"].startswith(f"{sys.executable} -m gate.hook --format codex")
    assert "--apply-edits" in pre["command"]

    payload = json.loads(
        (Path(__file__).parent / "fixtures" / "codex_pretooluse_bash.json").read_text()
    )
    payload.update(session_id=str(uuid.uuid4()), tool_input={"command": "rm -rf build/"})
    proc = run_as_agent(pre["command"], payload, cfg.AGENT)
    request = live.wait_pending("Bash", payload["session_id"])
    live.decide(request["id"], cfg.BOB, "reject", "no")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.startswith("gate: Rejected by bob in the API: no.")


@pytest.mark.parametrize(
    ("version", "edits", "flag_note"),
    [("0.130.0", False, False), ("0.118.0", False, True), (None, False, False)],
    ids=["before-edits", "before-default-hooks", "not-installed"],
)
def test_codex_without_edit_support_gets_no_apply_edits(
    dirs: tuple[Path, Path], version: str | None, edits: bool, flag_note: bool
) -> None:
    home, project = dirs
    env = fake_codex(home / "bin", version) if version else {"PATH": "/usr/bin:/bin"}
    existing = {
        "description": "team hooks",
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]},
    }
    (project / ".codex").mkdir()
    (project / ".codex" / "hooks.json").write_text(json.dumps(existing))

    done = gate_init("codex", "--no-check", home=home, cwd=project, env=env)

    written = json.loads((project / ".codex" / "hooks.json").read_text())
    (pre,) = handlers(written, "PreToolUse")
    assert done.returncode == 0, done.stderr
    assert ("--apply-edits" in pre["command"]) is edits
    assert written["description"] == "team hooks"
    assert written["hooks"]["Stop"] == existing["hooks"]["Stop"]
    assert ("codex_hooks = true" in done.stdout) is flag_note


def test_the_example_files_are_what_init_writes(dirs: tuple[Path, Path]) -> None:
    home, project = dirs
    examples = EXAMPLES
    env = {**fake_codex(home / "bin", "0.144.0"), "CODEX_HOME": str(home / ".codex")}
    config = ("--config", str(examples / "gate.toml"))

    claude = gate_init("claude-code", "--no-check", *config, home=home, cwd=project, env=env)
    codex = gate_init("codex", "--no-check", *config, home=home, cwd=project, env=env)

    assert (claude.returncode, codex.returncode) == (0, 0), claude.stderr + codex.stderr
    for written, example in [
        (project / ".claude" / "settings.json", examples / "claude-code" / "settings.json"),
        (project / ".codex" / "hooks.json", examples / "codex" / "hooks.json"),
    ]:
        text = written.read_text().replace(sys.executable, "/opt/gate/.venv/bin/python")
        assert json.loads(text) == json.loads(example.read_text())
