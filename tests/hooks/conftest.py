"""Fixtures for the hook tests: a real gate with rules that the Claude Code fixtures hit, and
helpers to run the real `gate hook` process against it.

The hook is the process under test; the gate it talks to is the app (`gate.app.create_app`)
read from a gate.toml as `gate serve --config` reads it, served by uvicorn with gate's own
protocol in a thread of the test process (`live`, `offering`, `serve_in_thread`): a `gate
serve` process costs some 2.5 s of CPU to start (its imports), the app in a thread, whose
imports the test process has already paid for, a small fraction of that. A test that kills or
restarts the gate takes a `gate serve` process of its own (`own_live`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate.app import create_app
from gate.config.settings import load_settings
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS
from tests.support.servers import ServerProcess, ThreadServer, wait_until, waiters_in

#: real Claude Code PreToolUse payloads (copies of shared/fixtures, see fixtures/README.md)
FIXTURES = Path(__file__).parent / "fixtures"

#: rules in front of the standard ones, so the real Claude Code payloads hit each behaviour
HOOK_RULES: list[dict[str, Any]] = [
    {
        "name": "risky-bash",
        "tools": ["Bash"],
        "when": "args.command.contains('rm ')",
        "approvers": ["group:finance"],
        "timeout": "10m",
        "reason": "Deleting files needs a human",
    },
    {
        "name": "dependency-edits",
        "tools": ["Edit"],
        "when": "args.file_path.endsWith('pubspec.yaml')",
        "approvers": ["group:finance"],
        "timeout": "10m",
    },
    {
        "name": "kotlin-writes",
        "tools": ["Write"],
        "when": "args.file_path.endsWith('.kt')",
        "timeout": "1s",
    },
    {
        "name": "no-ddl",
        "tools": ["mcp__supabase__*"],
        "when": "args.query.contains('DROP')",
        "action": "deny",
        "reason": "No schema changes from agents",
    },
    {
        "name": "sql-reads",
        "tools": ["mcp__supabase__*"],
        "when": "args.query.startsWith('SELECT')",
        "action": "allow",
    },
]


def hook_settings(database_url: str) -> dict[str, Any]:
    """The standard settings plus HOOK_RULES in front."""
    data = cfg.settings_data(database_url)
    data["rules"] = HOOK_RULES + data["rules"]
    return data


def fixture(name: str, **changes: Any) -> dict[str, Any]:
    """A real Claude Code payload from fixtures/, with top-level keys or tool_input changed."""
    payload: dict[str, Any] = json.loads((FIXTURES / f"claude_pretooluse_{name}.json").read_text())
    tool_input = changes.pop("tool_input", None)
    if tool_input:
        payload["tool_input"] = {**payload["tool_input"], **tool_input}
    payload.update(changes)
    return payload


@dataclass
class Live:
    """A running gate and ways to talk to it."""

    server: ServerProcess | ThreadServer
    db: Path

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, token: str = cfg.ADMIN) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30, verify=TLS
        )

    def pending(self, tool_name: str, session_id: str | None = None) -> dict[str, Any] | None:
        """The newest pending request for `tool_name` (and session), if any."""
        params = {"status": "pending", "tool_name": tool_name}
        if session_id:
            params["session_id"] = session_id
        with self.api() as c:
            items = c.get("/v1/requests", params=params).json()["items"]
        return items[0] if items else None

    def wait_pending(self, tool_name: str, session_id: str | None = None) -> dict[str, Any]:
        """The hook's request once it exists AND the hook is long-polling it.

        Waiting for the long-poll matters to the kill/restart tests: killed between the
        insert and the submit's reply, the hook would be in its submit phase, not its wait.
        """
        found: dict[str, Any] = wait_until(lambda: self.pending(tool_name, session_id), 20)
        wait_until(lambda: self.open_waiters() >= 1, 20)
        return found

    def open_waiters(self) -> int:
        """Long-polls open on the server right now, from /metrics."""
        with self.api() as c:
            return waiters_in(c.get("/metrics").text)

    def decide(self, request_id: str, token: str, verdict: str, comment: str | None = None) -> None:
        with self.api(token) as c:
            r = c.post(
                f"/v1/requests/{request_id}/decision",
                json={"verdict": verdict, "comment": comment},
            )
        assert r.status_code == 200, r.text

    def context(self, request_id: str) -> tuple[str | None, dict[str, Any]]:
        """(idempotency_key, context) of a stored request, read from the database file."""
        with closing(sqlite3.connect(self.db)) as conn:
            key, context = conn.execute(
                "SELECT idempotency_key, context FROM confirmation_request WHERE id = ?",
                (request_id,),
            ).fetchone()
        return key, json.loads(context)

    def hook(self, *args: str, token: str | None = cfg.AGENT) -> HookProcess:
        return HookProcess.start(self.url, token, list(args))


@dataclass
class HookProcess:
    """The real `gate hook` as a child process."""

    proc: subprocess.Popen[str]

    @classmethod
    def start(cls, url: str | None, token: str | None, args: list[str]) -> HookProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("GATE_URL", "GATE_TOKEN")}
        if url:
            env["GATE_URL"] = url
        if token:
            env["GATE_TOKEN"] = token
        proc = subprocess.Popen(
            [sys.executable, "-m", "gate.cli", "hook", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        return cls(proc)

    def send(self, payload: Any) -> HookProcess:
        assert self.proc.stdin is not None
        self.proc.stdin.write(payload if isinstance(payload, str) else json.dumps(payload))
        self.proc.stdin.close()
        self.proc.stdin = None  # so communicate() does not touch the closed pipe
        return self

    def result(self, timeout: float = 60) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def json(self, timeout: float = 60) -> tuple[int, Any, str]:
        code, out, err = self.result(timeout)
        return code, json.loads(out) if out.strip() else None, err


def run_hook(
    url: str | None, payload: Any, *args: str, token: str | None = cfg.AGENT
) -> tuple[int, Any, str]:
    """Run `gate hook ARGS` with `payload` on stdin to the end: (exit code, stdout JSON, stderr)."""
    return HookProcess.start(url, token, list(args)).send(payload).json()


@dataclass
class LiveProcess(Live):
    """A `gate serve` process and ways to talk to it (and to kill or restart it)."""

    server: ServerProcess


def start_server(tmp_path: Path) -> LiveProcess:
    """`gate serve` on a fresh SQLite file with the hook rules."""
    db = tmp_path / "gate.db"
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml(hook_settings(migrated_sqlite(db))))
    return LiveProcess(ServerProcess(path).start(), db)


@contextmanager
def serve_in_thread(tmp: Path, data: dict[str, Any]) -> Iterator[Live]:
    """The gate app configured by `data` (its database a SQLite file in `tmp`) and served in
    a thread of this process while the block runs: the settings are written to `tmp`/gate.toml
    and read back by `load_settings`, as `gate serve --config` reads them."""
    path = tmp / "gate.toml"
    path.write_text(cfg.to_toml(data))
    server = ThreadServer(create_app(load_settings(path))).start()
    try:
        yield Live(server, tmp / "gate.db")
    finally:
        server.stop()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One gate for a whole module (tests use distinct ids, so they do not meet)."""
    tmp = tmp_path_factory.mktemp("live")
    with serve_in_thread(tmp, hook_settings(migrated_sqlite(tmp / "gate.db"))) as live:
        yield live


@pytest.fixture
def own_live(tmp_path: Path) -> Iterator[LiveProcess]:
    """A `gate serve` process of the test's own, for tests that kill or restart it."""
    live = start_server(tmp_path)
    try:
        yield live
    finally:
        live.server.stop()


#: in front of the hook rules: Bash `deploy ...` calls offer grants and preset reject
#: reasons, `sudo ...` ones forbid edits
OFFER_RULES: list[dict[str, Any]] = [
    {
        "name": "deploys",
        "tools": ["Bash"],
        "when": "args.command.startsWith('deploy')",
        "approvers": ["group:finance"],
        "timeout": "10m",
        "grant_scopes": ["session", "call"],
        "max_grant": "1h",
        "reject_reasons": ["wrong environment", "too risky"],
    },
    {
        "name": "strict-bash",
        "tools": ["Bash"],
        "when": "args.command.startsWith('sudo')",
        "allow_edits": False,
        "timeout": "10m",
    },
]


@pytest.fixture(scope="module")
def offering(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A gate with OFFER_RULES, the hook rules and the standard ones, for one module."""
    tmp = tmp_path_factory.mktemp("offering")
    data = hook_settings(migrated_sqlite(tmp / "gate.db"))
    data["rules"] = OFFER_RULES + data["rules"]
    with serve_in_thread(tmp, data) as live:
        yield live


def bash(command: str, **changes: Any) -> dict[str, Any]:
    """A real Claude Code Bash payload with its own session and tool_use_id."""
    changes.setdefault("session_id", str(uuid.uuid4()))
    changes.setdefault("tool_use_id", f"toolu_{uuid.uuid4().hex[:24]}")
    return fixture("bash", tool_input={"command": command}, **changes)


def post_decision(live: Live, request_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a decision body (edits, grant, reasons...) as `token`; the request it returns."""
    with live.api(token) as c:
        r = c.post(f"/v1/requests/{request_id}/decision", json=body)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply
