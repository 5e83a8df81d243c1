"""History-aware conditions over HTTP (issue 32, item 8): `POST /v1/gate` on a real app, on
SQLite and PostgreSQL. A daily budget asks once the day's payments would pass it; a person's
rejection frees the budget again; a fourth deploy within the hour is denied however the agent
names itself."""

from __future__ import annotations

from typing import Any

from gate.config.settings import Settings
from tests.conftest import GateFactory
from tests.support import config as cfg

RULES: list[dict[str, Any]] = [
    {
        "name": "daily-budget",
        "tools": ["pay_*"],
        "when": 'history.sum("pay_*", "amount", "24h") + args.amount > 1000',
        "approvers": ["group:finance"],
        "timeout": "10m",
    },
    {"name": "payments", "tools": ["pay_*"], "action": "allow"},
    {
        "name": "deploy-rate",
        "tools": ["deploy_*"],
        "when": 'history.count("deploy_*", "1h") >= 3',
        "action": "deny",
    },
    {"name": "deploys", "tools": ["deploy_*"], "action": "allow"},
]


def test_a_budget_and_a_rate_over_http(make_gate: GateFactory, db_url: str) -> None:
    data = cfg.settings_data(db_url)
    data["rules"] = [*RULES, *data["rules"]]
    gate = make_gate(Settings(**data))
    with gate.client(cfg.AGENT) as agent, gate.client(cfg.ALICE) as alice:

        def pay(amount: int) -> dict[str, Any]:
            sent = agent.post(
                "/v1/gate", json={"tool_name": "pay_card", "tool_args": {"amount": amount}}
            )
            assert sent.status_code == 200, sent.text
            return dict(sent.json())

        assert pay(700)["decision"] == "allow"
        asked = pay(400)
        assert (asked["decision"], asked["rule"]) == ("ask", "daily-budget")
        assert pay(1)["decision"] == "ask"  # the 400 is in flight: 1101 so far
        rid = asked["request"]["id"]
        rejected = alice.post(
            f"/v1/requests/{rid}/decision", json={"verdict": "reject", "comment": "over budget"}
        )
        assert rejected.status_code == 200, rejected.text
        # the rejected 400 spent nothing; the pending 1 still counts: 701 + 299 = 1000
        assert pay(299)["decision"] == "allow"
        for n in range(3):
            body = {"tool_name": "deploy_web", "agent_id": f"deployer-{n}"}
            assert agent.post("/v1/gate", json=body).json()["decision"] == "allow"
        fourth = agent.post("/v1/gate", json={"tool_name": "deploy_web", "agent_id": "new-name"})
        assert (fourth.json()["decision"], fourth.json()["rule"]) == ("deny", "deploy-rate")
