"""What the agent reports and reads back: the outcome of an approved call, the end of its
session, and the hash-chained audit trail (`gate audit verify`)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.api.conftest import audit_kinds, post
from tests.conftest import Gate
from tests.support import config as cfg


def test_outcome_audit_reads_asked_approved_ran(ruled: Gate) -> None:
    req = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    early = post(ruled, cfg.AGENT, f"/v1/requests/{req['id']}/outcome", {"outcome": "ran"})
    assert early.status_code == 409 and early.json()["error"]["code"] == "not_approved"
    ruled.decide(req["id"], cfg.ALICE)
    r = post(
        ruled,
        cfg.AGENT,
        f"/v1/requests/{req['id']}/outcome",
        {"outcome": "ran", "summary": "paid, txn 881"},
    )
    assert r.json()["outcome"] == "ran"
    assert (
        post(
            ruled, cfg.AGENT, f"/v1/requests/{req['id']}/outcome", {"outcome": "failed"}
        ).status_code
        == 409
    )
    assert audit_kinds(ruled, req["id"]) == ["created", "approved", "ran"]


def test_audit_chain_detects_tampering(ruled: Gate, tmp_path: Path) -> None:
    req = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000})["request"]
    ruled.decide(req["id"], cfg.ALICE, "reject", "no")
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml({"server": {"database_url": ruled.settings.server.database_url}}))
    ok = subprocess.run(
        [sys.executable, "-m", "gate.cli", "audit", "verify", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and "audit chain intact" in ok.stdout
    with ruled.state.db.write() as s:
        s.execute(sa.text("UPDATE audit_event SET actor = 'mallory' WHERE kind = 'rejected'"))
    bad = subprocess.run(
        [sys.executable, "-m", "gate.cli", "audit", "verify", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1
    assert req["id"] in bad.stdout and "rejected" in bad.stdout


def test_session_end_cancels_its_pending_requests(ruled: Gate) -> None:
    ids = [
        ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000 + i}, session_id="sess-1")[
            "request"
        ]["id"]
        for i in range(2)
    ]
    other = ruled.submit(tool_name="pay_vendor", tool_args={"amount": 60000}, session_id="sess-2")[
        "request"
    ]["id"]
    seen: dict[str, Any] = {}

    def wait() -> None:
        with ruled.client(cfg.AGENT) as c:
            seen.update(c.get(f"/v1/requests/{ids[0]}/wait", params={"timeout": 20}).json())

    t = threading.Thread(target=wait)
    t.start()
    r = post(ruled, cfg.AGENT, "/v1/sessions/sess-1/cancel", {"reason": "session ended"})
    assert sorted(r.json()["cancelled"]) == sorted(ids)
    t.join(10)
    assert seen["status"] == "cancelled"
    assert seen["reason"] == "Cancelled by billing-agent: session ended"
    with ruled.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{other}").json()["status"] == "pending"
