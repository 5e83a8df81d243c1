"""examples/rust (the Omni-style BeforeToolCall hook) runs its own `cargo test` in the suite.

Its tests start a real `gate serve` themselves (through GATE_BIN, this checkout's `gate`), so
this wrapper only finds cargo, runs it offline (the crate has no dependencies) and reports.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CRATE = Path(__file__).resolve().parents[2] / "examples" / "rust"


def find_cargo() -> str | None:
    """cargo on the PATH, else where rustup puts it (~/.cargo/bin), else None."""
    found = shutil.which("cargo")
    if found:
        return found
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    candidate = home / "bin" / "cargo"
    return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None


def gate_executable() -> str:
    """The `gate` console script of the interpreter running the tests."""
    beside = Path(sys.executable).with_name("gate")
    found = str(beside) if beside.is_file() else shutil.which("gate")
    assert found, "no `gate` executable next to the test interpreter nor on the PATH"
    return found


@pytest.mark.slow
def test_rust_hook_example_cargo_test(tmp_path: Path) -> None:
    cargo = find_cargo()
    if cargo is None:
        pytest.skip("cargo is not installed (PATH or ~/.cargo/bin): examples/rust is not built")
    env = {
        **os.environ,
        "GATE_BIN": gate_executable(),
        # A build directory of this test's own: no stale or shared target/ in the checkout.
        "CARGO_TARGET_DIR": str(tmp_path / "target"),
        "PATH": f"{Path(cargo).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    result = subprocess.run(
        [cargo, "test", "--offline", "--quiet"],
        cwd=CRATE,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    passed = sum(int(n) for n in re.findall(r"test result: ok\. (\d+) passed", output))
    # The unit tests, the fail-closed tests and the live-server tests all ran.
    assert passed >= 15, output[-6000:]
    assert "FAILED" not in output
