"""A plain `pip install .` (a wheel, not the checkout) carries templates and migrations."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    (path,) = out.glob("gate_approvals-*.whl")  # the distribution's name: `gate` is taken
    return path


def test_wheel_contains_data_folders(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "gate/_bundled/migrations/env.py" in names
    assert "gate/_bundled/migrations/script.py.mako" in names
    assert any(n.startswith("gate/_bundled/migrations/versions/0001") for n in names)
    assert any(n.startswith("gate/_bundled/templates/") and n.endswith(".html") for n in names)
    assert "channels/slack/__init__.py" in names and "channels/feishu/__init__.py" in names
    assert "gate/policy/lookalikes.txt" in names  # gate.policy.toolnames reads it
    # /docs loads Swagger UI from gate itself (gate/api/docs.py), so the wheel carries it
    assert "gate/_bundled/templates/static/swagger-ui/swagger-ui-bundle.js" in names
    assert "gate/_bundled/templates/static/swagger-ui/LICENSE" in names
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "\nName: gate-approvals\n" in zipfile.ZipFile(wheel).read(metadata).decode()
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "gate = gate.cli:main" in text
    for channel in ("log", "slack", "feishu"):
        assert f"{channel} = channels.{channel}:" in text


def test_installed_wheel_migrates_without_the_checkout(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import gate.base.resources as r, gate.store.db as d; "
        "p = r.resource_path('migrations'); assert '_bundled' in str(p), p; "
        "assert '_bundled' in str(r.resource_path('templates')); "
        f"d.upgrade('sqlite:///{tmp_path / 'w.db'}'); print('ok')"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    # Run from elsewhere so the checkout's own `gate/` is not importable.
    result = subprocess.run(
        [sys.executable, "-P", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
