"""A real `gate serve` process, SIGKILLed and started again on the same database."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support import config as cfg
from tests.support.http import TLS
from tests.support.servers import ServerProcess, wait_until


def _client(server: ServerProcess, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30, verify=TLS
    )


def _wait_through_restarts(url_of: Any, request_id: str, result: dict[str, Any]) -> None:
    """What a hook does: long-poll, and on connection errors retry until a verdict."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            r = httpx.get(
                f"{url_of()}/v1/requests/{request_id}/wait",
                params={"timeout": 5},
                headers={"Authorization": f"Bearer {cfg.AGENT}"},
                timeout=10,
                verify=TLS,
            )
            body = r.json()
            if body.get("status") not in (None, "pending"):
                result.update(body)
                return
            result["polls"] = result.get("polls", 0) + 1
        except httpx.HTTPError:
            result["reconnects"] = result.get("reconnects", 0) + 1
            time.sleep(0.1)


def test_sigkill_loses_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'gate.db'}"
    server = ServerProcess(
        cfg.write_config(tmp_path / "gate.toml", db, sweep_interval_seconds=0.5)
    ).start()
    try:
        with _client(server, cfg.AGENT) as c:
            pending = [
                c.post(
                    "/v1/gate", json={"tool_name": "pay_vendor", "tool_args": {"amount": 60000 + i}}
                ).json()["request"]["id"]
                for i in range(5)
            ]
            short = c.post("/v1/gate", json={"tool_name": "ephemeral_job"}).json()["request"]
        result: dict[str, Any] = {}
        waiter = threading.Thread(
            target=_wait_through_restarts, args=(lambda: server.url, pending[0], result)
        )
        waiter.start()

        server.kill(signal.SIGKILL)
        # The 1 s deadline of `short` passes while no server runs.
        time.sleep(1.5)
        server.start()
        with _client(server, cfg.ADMIN) as c:
            # Expired by the catch-up sweep at start-up, not left pending.
            expired = wait_until(
                lambda: c.get(f"/v1/requests/{short['id']}").json()["status"] == "expired",
                timeout=10,
            )
            assert expired
            statuses = [c.get(f"/v1/requests/{i}").json()["status"] for i in pending]
            assert statuses == ["pending"] * 5
        with _client(server, cfg.ALICE) as c:
            assert (
                c.post(
                    f"/v1/requests/{pending[0]}/decision",
                    json={"verdict": "approve", "comment": "after restart"},
                ).status_code
                == 200
            )
        waiter.join(30)
        assert result["status"] == "approved"
        assert result["reason"] == "Approved by alice in the API: after restart"
        assert result.get("reconnects", 0) >= 1
        assert "catch-up sweep expired 1 request(s)" in server.log()
    finally:
        server.stop()


def test_serve_without_a_config_file(tmp_path: Path) -> None:
    """No gate.toml at all: SQLite ./gate.db, loopback, and a hint about rules in the log."""
    env_cwd = tmp_path / "empty"
    env_cwd.mkdir()
    log = tmp_path / "serve.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gate.cli", "serve", "--port", "0"],
            cwd=env_cwd,
            stdout=fh,
            stderr=fh,
        )
    try:
        wait_until(lambda: "Uvicorn running on http://127.0.0.1:" in log.read_text(), timeout=30)
        text = log.read_text()
        assert "no [[rules]] configured" in text
        assert "NO TOKENS CONFIGURED" in text
        assert (env_cwd / "gate.db").exists()
    finally:
        proc.terminate()
        proc.wait(10)


def test_broken_policy_stops_start_up_naming_file_rule_and_reason(tmp_path: Path) -> None:
    bad = tmp_path / "gate.toml"
    bad.write_text('[[rules]]\nname = "big"\ntools = ["pay_*"]\nwhen = "args.amount >"\n')
    r = subprocess.run(
        [sys.executable, "-m", "gate.cli", "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2  # gate cannot start because of its configuration
    assert str(bad) in r.stderr
    assert f'{bad}:4: rule "big"' in r.stderr
    assert "not valid CEL" in r.stderr
    assert "Traceback" not in r.stderr
