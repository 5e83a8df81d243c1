"""`gate serve` says what it does: where the console is and what to do next, one access line
per HTTP request (JSON keys with `log_json`), every refused credential, and one line per
request asked and decided. Run as a real `gate serve` process, read from its log.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate.config.settings import Settings
from gate.server.serve import welcome
from tests.support import config as cfg
from tests.support.http import TLS
from tests.support.servers import ServerProcess, wait_until

AGENT = {"Authorization": f"Bearer {cfg.AGENT}"}
ALICE = {"Authorization": f"Bearer {cfg.ALICE}"}


def _serve(tmp_path: Path, **server: Any) -> ServerProcess:
    path = cfg.write_config(
        tmp_path / "gate.toml", f"sqlite:///{tmp_path / 'gate.db'}", log_json=True, **server
    )
    process = ServerProcess(path)
    if server.get("log_level") == "WARNING":
        # it will not say where it listens (an INFO line): give it a port that was just free
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            process.port = probe.getsockname()[1]
    return process.start()


def _records(server: ServerProcess) -> list[dict[str, Any]]:
    """The JSON lines of the server's log (anything else it printed is skipped)."""
    found = []
    for line in server.log().splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def _access(server: ServerProcess, request_id: str) -> dict[str, Any]:
    def line() -> dict[str, Any] | None:
        return next(
            (
                r
                for r in _records(server)
                if r["logger"] == "gate.access" and r["request_id"] == request_id
            ),
            None,
        )

    found: dict[str, Any] = wait_until(line)
    return found


#: the sign-in proxy's proof (`[server].trusted_proxy_secret`), for a console request
PROXY_SECRET = "proxy-secret-0123456789"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module's tests: each finds its own lines by request id."""
    server = _serve(
        tmp_path_factory.mktemp("served"),
        trusted_user_header="X-Forwarded-User",
        trusted_proxy_secret=PROXY_SECRET,
    )
    try:
        yield server
    finally:
        server.stop()


def test_start_up_names_the_console_and_the_next_step(served: ServerProcess) -> None:
    said = [r["message"] for r in _records(served) if r["logger"] == "gate.server"]
    assert f"console: {served.url}/ (approve and reject there)" in said
    assert (
        f"next: give each agent its token as GATE_TOKEN with GATE_URL={served.url} "
        "(`gate tokens new NAME` makes one); approvers sign in at the console"
    ) in said


def test_the_next_step_follows_the_configuration() -> None:
    bare = Settings()
    assert welcome(bare, "http://127.0.0.1:8000")[1].startswith(
        "next: add [[rules]] to gate.toml saying which tool calls need an approval"
    )
    rules_only = Settings(rules=[{"name": "r", "tools": ["pay_*"]}])
    lines = welcome(rules_only, "http://127.0.0.1:8000")
    assert lines[0] == "console: http://127.0.0.1:8000/ (approve and reject there)"
    assert lines[1] == (
        "next: in your project, `gate init claude-code` sends Claude Code's tool calls here; "
        "`gate requests list` shows what waits for you"
    )
    elsewhere = welcome(rules_only, "http://127.0.0.1:9000")[1]
    assert "`gate init claude-code --url http://127.0.0.1:9000`" in elsewhere
    assert "`gate requests list --url http://127.0.0.1:9000`" in elsewhere
    public = Settings(server={"public_url": "https://gate.example.com"})
    assert welcome(public, "http://0.0.0.0:8000")[0].startswith(
        "console: https://gate.example.com/"
    )


def test_each_request_gets_one_access_line_without_its_secrets(served: ServerProcess) -> None:
    with httpx.Client(base_url=served.url, timeout=30, verify=TLS) as http:
        allowed = http.post(
            "/v1/gate", json={"tool_name": "read_x", "tool_args": {}}, headers=AGENT
        )
        assert allowed.status_code == 200, allowed.text
        health = http.get("/healthz", params={"token": "hunter2-in-a-query"})
    line = _access(served, allowed.headers["x-request-id"])
    assert line["level"] == "INFO"
    assert line["method"] == "POST" and line["path"] == "/v1/gate" and line["status"] == 200
    assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
    assert line["principal"] == "billing-agent"
    assert line["message"].startswith("POST /v1/gate 200 ") and line["message"].endswith(
        " ms by billing-agent"
    )
    plain = _access(served, health.headers["x-request-id"])
    assert plain["path"] == "/healthz" and plain["principal"] is None
    log = served.log()
    assert cfg.AGENT not in log and "hunter2-in-a-query" not in log
    lines = [r for r in _records(served) if r["request_id"] == allowed.headers["x-request-id"]]
    assert [r["logger"] for r in lines] == ["gate.access"]  # one line, nothing else


def test_refused_credentials_are_logged_without_the_token(served: ServerProcess) -> None:
    call = {"tool_name": "read_x", "tool_args": {}}
    with httpx.Client(base_url=served.url, timeout=30, verify=TLS) as http:
        forged = http.post("/v1/gate", json=call, headers={"Authorization": "Bearer forged-tok"})
        bare = http.get("/v1/requests")
        asked = http.post(
            "/v1/gate", json={"tool_name": "ask_x", "tool_args": {}}, headers=AGENT
        ).json()
        wrong_role = http.post(
            f"/v1/requests/{asked['request']['id']}/decision",
            json={"verdict": "approve"},
            headers=AGENT,
        )
    assert (forged.status_code, bare.status_code, wrong_role.status_code) == (401, 401, 403)
    records = _records(served)
    refused = [r for r in records if r["logger"] == "gate.api" and r["level"] == "WARNING"]
    by_id = {r["request_id"]: r["message"] for r in refused}
    assert by_id[forged.headers["x-request-id"]] == (
        "refused POST /v1/gate from 127.0.0.1: 401 invalid_token: unknown or revoked token"
    )
    assert by_id[bare.headers["x-request-id"]].startswith(
        "refused GET /v1/requests from 127.0.0.1: 401 missing_token: missing bearer token"
    )
    assert by_id[wrong_role.headers["x-request-id"]].startswith(
        f"refused POST /v1/requests/{asked['request']['id']}/decision from 127.0.0.1: "
        "403 wrong_role: a token with role 'agent' cannot do this"
    )
    assert _access(served, forged.headers["x-request-id"])["status"] == 401
    assert _access(served, wrong_role.headers["x-request-id"])["principal"] == "billing-agent"
    assert "forged-tok" not in served.log()


def test_asked_and_decided_lines_carry_id_tool_rule_and_outcome(served: ServerProcess) -> None:
    body = {"tool_name": "pay_vendor", "tool_args": {"amount": 90000}}
    with httpx.Client(base_url=served.url, timeout=30, verify=TLS) as http:
        rid = http.post("/v1/gate", json=body, headers=AGENT).json()["request"]["id"]
        waited = http.get(f"/v1/requests/{rid}/wait", params={"timeout": "0.1"}, headers=AGENT)
        decided = http.post(
            f"/v1/requests/{rid}/decision",
            json={"verdict": "reject", "comment": "no"},
            headers=ALICE,
        )
        assert decided.status_code == 200, decided.text

    def lines() -> list[dict[str, Any]]:
        return [
            r for r in _records(served) if r["logger"] == "gate.requests" and r["request"] == rid
        ]

    wait_until(lambda: len(lines()) == 2)
    asked, ended = lines()
    assert {k: asked[k] for k in ("request", "tool", "rule", "outcome")} == {
        "request": rid,
        "tool": "pay_vendor",
        "rule": "big-payments",
        "outcome": "asked",
    }
    assert (ended["request"], ended["outcome"], ended["rule"]) == (rid, "rejected", "big-payments")
    assert ended["message"].startswith(f"request {rid} rejected by alice via api")
    parked = _access(served, waited.headers["x-request-id"])  # the long-poll is logged too
    assert parked["path"] == f"/v1/requests/{rid}/wait" and parked["principal"] == "billing-agent"


def test_a_warning_level_keeps_refusals_and_drops_the_access_lines(tmp_path: Path) -> None:
    server = _serve(tmp_path, log_level="WARNING")
    try:
        with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
            ok = http.post("/v1/gate", json={"tool_name": "read_x", "tool_args": {}}, headers=AGENT)
            forged = http.get("/v1/requests", headers={"Authorization": "Bearer forged-tok"})
        assert (ok.status_code, forged.status_code) == (200, 401)
        wait_until(lambda: any(r["logger"] == "gate.api" for r in _records(server)))
    finally:
        server.stop()
    records = _records(server)
    assert not [r for r in records if r["logger"] == "gate.access"]
    assert [r["request_id"] for r in records if r["logger"] == "gate.api"] == [
        forged.headers["x-request-id"]
    ]


def test_a_console_request_is_logged_with_the_signed_in_approver(served: ServerProcess) -> None:
    signed_in = {"X-Forwarded-User": "alice", "X-Gate-Proxy-Secret": PROXY_SECRET}
    with httpx.Client(base_url=served.url, timeout=30, verify=TLS) as http:
        page = http.get("/", headers=signed_in)
    assert page.status_code == 200, page.text
    line = _access(served, page.headers["x-request-id"])
    assert (line["method"], line["path"], line["principal"]) == ("GET", "/", "alice")
    assert PROXY_SECRET not in served.log()
