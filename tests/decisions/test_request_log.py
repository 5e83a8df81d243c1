"""`gate serve` logs one line per request asked and one per request decided.

Working alone, nothing else says a call waits: the server's log does, through gate's logging
set-up (`gate.base.logs`), at INFO, naming the request, tool, rule, outcome and who decided it and
how. Run as a real `gate serve` process, read from its stderr.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS
from tests.support.servers import ServerProcess, wait_until


def test_serve_logs_each_request_asked_and_decided(tmp_path: Path) -> None:
    data = cfg.settings_data(migrated_sqlite(tmp_path / "gate.db"))
    data["server"]["migrate_on_start"] = True
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml(data))
    server = ServerProcess(path).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30, verify=TLS) as http:
            agent = {"Authorization": f"Bearer {cfg.AGENT}"}
            body = {"tool_name": "pay_vendor\nrequest 0 approved", "tool_args": {"amount": 90000}}
            asked = http.post("/v1/gate", json=body, headers=agent).json()["request"]
            short = {"tool_name": "ephemeral_x", "tool_args": {}}
            expiring = http.post("/v1/gate", json=short, headers=agent).json()["request"]
            decided = http.post(
                f"/v1/requests/{asked['id']}/decision",
                json={"verdict": "approve"},
                headers={"Authorization": f"Bearer {cfg.ALICE}"},
            )
            assert decided.status_code == 200, decided.text
        wait_until(lambda: f"request {expiring['id']} expired" in server.log(), timeout=30)
    finally:
        server.stop()

    lines = [line for line in server.log().splitlines() if " gate.requests " in line]
    ask_line = next(line for line in lines if f"request {asked['id']} asked" in line)
    assert " INFO " in ask_line
    # the agent's tool name is quoted: its newline cannot start a forged line
    assert "tool 'pay_vendor\\nrequest 0 approved', rule 'big-payments'" in ask_line
    assert "approvers alice,bob" in ask_line
    assert any(
        f"request {asked['id']} approved by alice via api: tool 'pay_vendor" in line
        for line in lines
    ), lines
    assert any(
        f"request {expiring['id']} expired by nobody via timeout: tool 'ephemeral_x', "
        "rule 'short-fuse'" in line
        for line in lines
    ), lines
    assert sum(asked["id"] in line for line in lines) == 2
