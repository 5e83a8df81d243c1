"""The real `gate` command as a child process, for tests of what a user types and reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_gate(
    *args: str | Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `gate ARGS` (this checkout's, by `python -m gate.cli`) to the end; `env` is added to
    the test's environment. A minute at most: a command that hangs fails the test."""
    return subprocess.run(
        [sys.executable, "-m", "gate.cli", *map(str, args)],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
