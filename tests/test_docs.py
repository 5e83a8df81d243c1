"""The README and the docs site are the product's front page: settings, commands, install lines
and the walkthrough must be true, and the site must build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from gate.config.settings import ServerSettings
from tests.support import docs
from tests.support.docs import README, ROOT
from tests.support.servers import wait_until

#: a command that runs gate: at the start of a line, or after `&&`, `||`, `;`, `|` or `$(`
GATE_COMMAND = re.compile(r"(?:^|&&|\|\||;|\||\$\()\s*(?P<program>\S*gate)\s+[a-z]", re.M)


def _readme_section(name: str) -> str:
    match = re.search(
        rf"<!-- section:{name} -->(.*?)<!-- /section:{name} -->", README.read_text(), re.S
    )
    assert match, f"README has no section {name!r}"
    return match.group(1)


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def _walkthrough() -> str:
    (block,) = _bash_blocks(_readme_section("walkthrough"))
    return block


def test_every_server_setting_is_documented() -> None:
    table = docs.section("config")
    missing = [f for f in ServerSettings.model_fields if f"| `{f}` |" not in table]
    assert missing == []


def test_the_two_commands_come_first() -> None:
    text = README.read_text()
    first_block = text.split("```bash", 1)[1].split("```", 1)[0]
    assert "gate serve" in first_block
    assert "pytest" in first_block
    ci = (README.parent / ".ci" / "run").read_text()
    assert ".venv/bin/pytest" in ci


def test_the_readme_stays_a_front_page() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_every_later_command_names_the_venvs_gate() -> None:
    """Command 1 does not activate the venv, so a bare `gate ...` would be "command not found"."""
    bare = [
        f"{page.relative_to(ROOT)}: {line.strip()}"
        for page in [README, *docs.pages()]
        for block in _bash_blocks(page.read_text())
        for line in block.splitlines()
        for found in GATE_COMMAND.finditer(line.split("#", 1)[0])
        if found.group("program") != ".venv/bin/gate"
    ]
    assert bare == []


def test_the_getting_started_page_has_the_readmes_walkthrough() -> None:
    assert _bash_blocks(docs.section("walkthrough")) == [_walkthrough()]


def test_install_lines_name_this_distribution() -> None:
    """Each `pip install` installs gate: `.` from a clone, or `gate-approvals` from the index,
    with extras that exist. (`gate` on the package index is someone else's.)"""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "gate-approvals"
    extras = set(project["optional-dependencies"])
    lines = [
        match.group(1)
        for page in [README, *docs.pages()]
        for match in re.finditer(r"pip install ((?:-e )?'?[^\s'`]+'?)", page.read_text())
    ]
    assert lines
    for target in lines:
        spec = target.removeprefix("-e ").strip("'")
        name, _, rest = spec.partition("[")
        assert name in (".", "gate-approvals"), target
        for extra in filter(None, rest.rstrip("]").split(",")):
            assert extra in extras, target


def _shown(block: str) -> list[re.Pattern[str]]:
    """The walkthrough's `# ->` lines, each a pattern for one line it prints (`...`: anything)."""
    shown = [line.split("# -> ", 1)[1] for line in block.splitlines() if "# -> " in line]
    return [re.compile(".*?".join(map(re.escape, line.split("...")))) for line in shown]


def test_walkthrough_prints_what_it_shows(tmp_path: Path) -> None:
    """Run the README's curl walkthrough against a fresh `gate serve` with no config file:
    it prints one newline-terminated line per `# ->`, each matching what the README shows."""
    block = _walkthrough()
    log = tmp_path / "serve.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gate.cli", "serve", "--port", "0"],
            cwd=tmp_path,
            stdout=fh,
            stderr=fh,
        )
    try:
        port = wait_until(
            lambda: re.search(r"running on http://127\.0\.0\.1:(\d+)", log.read_text()), timeout=30
        ).group(1)
        script = block.replace("localhost:8000", f"localhost:{port}")
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        proc.terminate()
        proc.wait(10)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.endswith("\n")
    printed = out.splitlines()
    expected = _shown(block)
    assert len(printed) == len(expected) == 4, out
    for pattern, line in zip(expected, printed, strict=True):
        assert pattern.fullmatch(line), f"shown: {pattern.pattern}\nprinted: {line}"
    assert "Approved by local in the API: invoice checked" in out
    assert '"code":"already_decided"' in out


def test_the_first_rule_is_the_one_the_agent_tests_check() -> None:
    """README and Getting started start Claude Code with the starter rule that
    tests/hooks/test_readme_wire.py runs through `gate policy explain`."""
    toml = re.compile(r"```toml\n(.*?)```", re.S)
    (starter,) = toml.findall(docs.section("wire"))
    getting_started = (docs.DOCS / "getting-started.md").read_text()
    assert toml.findall(README.read_text()) == [starter]
    assert toml.findall(getting_started) == [starter]


def test_getting_started_first_rule_runs_as_written(tmp_path: Path) -> None:
    """Getting started's commands after the walkthrough, verbatim, in a folder holding a
    `.venv/bin/gate` and the page's gate.toml: the check, the server, `gate init claude-code`."""
    part = (docs.DOCS / "getting-started.md").read_text().split("## A first rule", 1)[1]
    (rule,) = re.findall(r"```toml\n(.*?)```", part, re.S)
    block = _bash_blocks(part)[0]
    commands = [c for c in (line.split("#", 1)[0].strip() for line in block.splitlines()) if c]
    check, serve, init = commands
    assert serve == ".venv/bin/gate serve"
    program = tmp_path / ".venv" / "bin" / "gate"
    program.parent.mkdir(parents=True)
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gate.cli "$@"\n')
    program.chmod(0o755)
    (tmp_path / "gate.toml").write_text(rule)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATE_")}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))

    def run(command: str, **more: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env={**env, **more},
            capture_output=True,
            text=True,
            timeout=60,
        )

    checked = run(check)
    assert checked.returncode == 0, checked.stderr
    assert "gate.toml: OK, 1 rule(s)" in checked.stdout
    log = tmp_path / "serve.log"
    with open(log, "wb") as fh:  # on a free port, not the page's 8000: tests run side by side
        proc = subprocess.Popen(
            ["bash", "-c", f"exec {serve} --port 0"], cwd=tmp_path, env=env, stdout=fh, stderr=fh
        )
    try:
        port = wait_until(
            lambda: re.search(r"running on http://127\.0\.0\.1:(\d+)", log.read_text()), timeout=30
        ).group(1)
        installed = run(init, GATE_URL=f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(10)
    assert installed.returncode == 0, installed.stderr
    assert "needs no token (local mode" in installed.stdout
    settings = tmp_path / "home" / "code" / "my-project" / ".claude" / "settings.json"
    assert '"matcher": "Bash"' in settings.read_text()
    assert "gate ready: database sqlite:///./gate.db, 1 rule(s)" in log.read_text()
