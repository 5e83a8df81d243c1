"""Setting up for real without guesswork: tokens, request context, a busy port."""

from __future__ import annotations

from pathlib import Path

import httpx

from gate.config.settings import load_settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.cli import gate_in_process, run_gate
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS


def test_tokens_new_prints_a_token_once_and_an_entry_that_stores_only_its_hash(
    tmp_path: Path, make_gate: GateFactory
) -> None:
    made = gate_in_process("tokens", "new", "billing-agent", "--role", "agent")
    assert made.returncode == 0, made.stderr
    token, *entry = made.stdout.strip().splitlines()
    assert token.startswith("gate_agent_") and len(token) > 40
    assert entry[0] == "[[tokens]]" and 'name = "billing-agent"' in entry
    assert token not in "\n".join(entry)  # only the hash goes into gate.toml
    assert "shown once" in made.stderr
    # the printed entry, pasted into gate.toml, makes the token work (and nothing else does)
    data = cfg.settings_data(migrated_sqlite(tmp_path / "gate.db"))
    data["tokens"] = [t for t in data["tokens"] if t["role"] != "agent"]
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml(data) + "\n" + "\n".join(entry) + "\n")
    # gate.toml read by gate's own loader, served by gate's app (in a thread: the server
    # process itself is not what this tests)
    server = make_gate(load_settings(path))
    body = {"tool_name": "read_file", "tool_args": {}}
    ok = httpx.post(
        server.url + "/v1/gate",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        verify=TLS,
    )
    assert ok.status_code == 200 and ok.json()["decision"] == "allow", ok.text
    bad = httpx.post(
        server.url + "/v1/gate",
        json=body,
        headers={"Authorization": f"Bearer {token}x"},
        verify=TLS,
    )
    assert bad.status_code == 401


def test_an_approver_token_needs_its_approver() -> None:
    # the real command: `gate tokens new`'s exit status and stdio
    made = run_gate("tokens", "new", "alice-phone", "--role", "approver")
    assert made.returncode == 2 and "--approver" in made.stderr and not made.stdout


def test_the_api_and_requests_show_carry_the_requests_context(gate_sqlite: Gate) -> None:
    server = gate_sqlite
    context = {"cwd": "/srv/app", "permission_mode": "default", "transcript_path": "/t"}
    body = {
        "tool_name": "ask_anything",
        "tool_args": {"q": 1},
        "session_id": "sess-42",
        "context": context,
    }
    headers = {"Authorization": f"Bearer {cfg.AGENT}"}
    rid = httpx.post(server.url + "/v1/gate", json=body, headers=headers, verify=TLS).json()[
        "request"
    ]["id"]
    got = httpx.get(server.url + f"/v1/requests/{rid}", headers=headers, verify=TLS).json()
    assert got["context"] == context and got["session_id"] == "sess-42"
    assert got["submitted_by"] == "billing-agent"
    shown = gate_in_process("requests", "--url", server.url, "--token", cfg.ADMIN, "show", rid)
    assert shown.returncode == 0, shown.stderr
    assert '"cwd": "/srv/app"' in shown.stdout and '"permission_mode": "default"' in shown.stdout
    assert "sess-42" in shown.stdout


def test_a_second_serve_on_a_busy_port_fails_before_touching_its_database(
    tmp_path: Path, gate_sqlite: Gate
) -> None:
    # the first server holds 127.0.0.1:<port> (a gate app in a thread); the second is the
    # real `gate serve` process, whose refusal is what this tests
    first = gate_sqlite
    port = first.server.port
    second_db = tmp_path / "two.db"
    second = cfg.write_config(tmp_path / "two.toml", f"sqlite:///{second_db}")
    done = run_gate("serve", "--config", str(second), "--port", str(port))
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not second_db.exists()  # nothing was created or migrated
    assert httpx.get(first.url + "/healthz", verify=TLS).status_code == 200
