"""Approval chains over HTTP (SQLite and PostgreSQL): the 422 for a missing justification
names the field, a later stage's approver is refused with its own code, the request shows
which stage waits and who decided the ones before, and `gate hook` tells the model to retry
with a justification."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gate.config.settings import Settings
from tests.conftest import GateFactory
from tests.hooks.conftest import Live, bash, hook_settings
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.servers import ServerProcess

RULES: list[dict[str, Any]] = [
    {
        "name": "chained",
        "tools": ["chain_pay"],
        "justification": "required",
        "stages": [
            {"name": "lead", "approvers": ["carol"]},
            {"name": "finance", "approvers": ["group:finance"], "votes": {"approve": 2}},
        ],
    },
]


def _gate(make_gate: GateFactory, db_url: str) -> Any:
    data = cfg.settings_data(db_url)
    data["rules"] = RULES + data["rules"]
    return make_gate(settings=Settings(**data))


def test_a_missing_justification_is_a_422_naming_the_field(
    make_gate: GateFactory, db_url: str
) -> None:
    gate = _gate(make_gate, db_url)
    with gate.client(cfg.AGENT) as c:
        r = c.post("/v1/gate", json={"tool_name": "chain_pay", "tool_args": {"amount": 5}})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "justification_required"
    assert error["message"].startswith("justification: rule 'chained' needs")
    assert error["problems"][0]["field"] == "justification"


def test_a_chain_over_the_api(make_gate: GateFactory, db_url: str) -> None:
    gate = _gate(make_gate, db_url)
    answer = gate.submit(
        tool_name="chain_pay", tool_args={"amount": 5}, justification="invoice 7 is due"
    )
    request = answer["request"]
    assert (request["stage"], request["stage_label"]) == (0, "stage 1 of 2 (lead)")
    assert request["justification"] == "invoice 7 is due" and request["approvers"] == ["carol"]
    rid = request["id"]
    early = gate.decide(rid, cfg.ALICE)
    assert early.status_code == 403 and early.json()["error"]["code"] == "not_your_turn"
    passed = gate.decide(rid, cfg.CAROL, comment="fine by me")
    assert passed.status_code == 200, passed.text
    body = passed.json()
    assert (body["status"], body["stage"], body["stage_label"]) == (
        "pending",
        1,
        "stage 2 of 2 (finance)",
    )
    assert body["decided_stages"] == ["stage 1 of 2 (lead): approved by carol"]
    assert body["votes"][0]["stage"] == 0
    assert gate.decide(rid, cfg.ALICE).json()["status"] == "pending"
    done = gate.decide(rid, cfg.BOB).json()
    assert done["status"] == "approved" and [v["stage"] for v in done["votes"]] == [0, 1, 1]


def test_gate_hook_tells_the_model_to_retry_with_a_justification(tmp_path: Path) -> None:
    data = hook_settings(migrated_sqlite(tmp_path / "gate.db"))
    data["rules"] = [
        {
            "name": "payments",
            "tools": ["Bash"],
            "when": "args.command.startsWith('pay')",
            "justification": "required",
            "approvers": ["alice"],
            "timeout": "10m",
        },
        *data["rules"],
    ]
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml(data))
    live = Live(ServerProcess(path).start(), tmp_path / "gate.db")
    try:
        bare = bash("pay invoice 7")
        del bare["tool_input"]["description"]
        code, out, _ = live.hook().send(bare).json()
        said = out["hookSpecificOutput"]
        assert code == 0 and said["permissionDecision"] == "deny"
        reason = said["permissionDecisionReason"]
        assert "needs the agent to say why" in reason
        assert "Retry the same call with a justification" in reason
        assert live.pending("Bash", bare["session_id"]) is None  # nobody was asked
        justified = bash("pay invoice 7")
        justified["tool_input"]["description"] = "the user asked for it"
        hook = live.hook().send(justified)
        request = live.wait_pending("Bash", justified["session_id"])
        assert request["justification"] == "the user asked for it"
        live.decide(request["id"], cfg.ALICE, "approve")
        assert hook.json()[1]["hookSpecificOutput"]["permissionDecision"] == "allow"
    finally:
        live.server.stop()
