"""The README is the product's front page: settings, commands and the walkthrough must be true."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gate.config import ServerSettings
from tests.support.servers import wait_until

README = Path(__file__).resolve().parent.parent / "README.md"


def _section(name: str) -> str:
    text = README.read_text()
    match = re.search(rf"<!-- section:{name} -->(.*?)<!-- /section:{name} -->", text, re.S)
    assert match, f"README has no section {name!r}"
    return match.group(1)


def test_every_server_setting_is_documented() -> None:
    table = _section("config")
    missing = [f for f in ServerSettings.model_fields if f"| `{f}` |" not in table]
    assert missing == []


def test_the_two_commands_come_first() -> None:
    text = README.read_text()
    first_block = text.split("```bash", 1)[1].split("```", 1)[0]
    assert "gate serve" in first_block
    assert "pytest" in first_block
    ci = (README.parent / ".ci" / "run").read_text()
    assert ".venv/bin/pytest" in ci


def test_walkthrough_runs_as_written(tmp_path: Path) -> None:
    """Run the README's curl walkthrough against a fresh `gate serve` with no config file."""
    block = _section("walkthrough").split("```bash", 1)[1].split("```", 1)[0]
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
    assert '"decision":"ask"' in out
    assert '"status":"approved"' in out
    assert "Approved by local in the API: invoice checked" in out
    assert '"code":"already_decided"' in out
