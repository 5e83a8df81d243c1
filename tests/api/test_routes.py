"""`[[routes]]`: where a request's cards go is set by conditions over the call, apart from who
may decide it. Checked through the real app on each database: the delivery rows it writes
(the log channel takes any target) and the `created` audit event that says why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg

#: a schedule whose first shift began a day and a half ago: bob is on call now
ONCALL = {
    "name": "payments",
    "people": ["alice", "bob"],
    "shift": "1d",
    "start": (datetime.now(UTC) - timedelta(hours=36)).isoformat(),
}
ROUTES: list[dict[str, Any]] = [
    {
        "name": "huge payments",
        "rules": ["big-payments"],
        "when": "args.amount > 1000000",
        "channels": ["log:board-room"],
        "oncall": ["payments"],
    },
    {
        "name": "payments in euros",
        "rules": ["big-payments"],
        "when": "args.currency == 'EUR'",
        "channels": ["log:eu-finance"],
        "users": ["carol"],
        "stop": False,
    },
    {
        "name": "every payment to finance",
        "rules": ["big-payments"],
        "channels": ["log:finance"],
        "keep_rule_channels": True,
    },
]


def routed_gate(make_gate: GateFactory, db_url: str, routes: list[dict[str, Any]]) -> Gate:
    data = cfg.settings_data(db_url)
    data["channels"] = {"log": {"default_target": "everyone"}}
    for approver in data["approvers"]:  # each person's "id" on the log channel
        approver["log"] = f"dm-{approver['name']}"
    data["routes"], data["oncall"] = routes, [ONCALL]
    return make_gate(Settings(**data))


def targets(gate: Gate, request_id: str) -> set[str]:
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    return {f"{d.channel}:{d.target}" for d in view.deliveries if d.kind == "post"}


def created(gate: Gate, request_id: str) -> dict[str, Any]:
    view = gate.state.service.view(request_id, full=True)
    assert view is not None
    detail: dict[str, Any] = view.audit[0].detail
    return detail


def pay(gate: Gate, **args: Any) -> str:
    answer = gate.submit(tool_name="pay_vendor", tool_args={"vendor": "acme", **args})
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def test_the_first_matching_route_decides_where_cards_go(
    make_gate: GateFactory, db_url: str
) -> None:
    gate = routed_gate(make_gate, db_url, ROUTES)
    # a huge payment: the board room and whoever is on call (bob, a direct card); it stops
    huge = pay(gate, amount=2000000, currency="EUR")
    assert targets(gate, huge) == {"log:board-room", "log:dm-bob"}
    said = created(gate, huge)
    assert said["routes"] == ["huge payments"]
    assert sorted(said["routed_to"]) == ["log:board-room", "log:dm-bob"]
    # euros: carol directly, then (stop = false) on to the catch-all, which keeps the rule's
    # own destinations (here every channel's default target)
    euros = pay(gate, amount=60000, currency="EUR")
    assert targets(gate, euros) == {"log:eu-finance", "log:dm-carol", "log:finance", "log:everyone"}
    assert created(gate, euros)["routes"] == ["payments in euros", "every payment to finance"]
    # routing decides where cards go, never who decides: carol got a card, and is refused
    r = gate.decide(euros, cfg.CAROL)
    assert r.status_code == 403 and r.json()["error"]["code"] == "not_an_approver"
    assert gate.decide(euros, cfg.ALICE).status_code == 200


def test_a_request_no_route_matches_goes_where_its_rule_says(
    make_gate: GateFactory, db_url: str
) -> None:
    gate = routed_gate(make_gate, db_url, ROUTES)
    answer = gate.submit(tool_name="deploy_api", tool_args={})
    rid = answer["request"]["id"]
    assert targets(gate, rid) == {"log:everyone"}
    assert "routes" not in created(gate, rid)


def test_a_route_whose_condition_fails_sends_wider_never_nowhere(
    make_gate: GateFactory, db_url: str
) -> None:
    # `args.amount` is a text on this call: the comparison fails at run time
    route = {"name": "by amount", "when": "args.amount > 10", "channels": ["log:finance"]}
    gate = routed_gate(make_gate, db_url, [route])
    rid = gate.submit(tool_name="deploy_api", tool_args={"amount": "lots"})["request"]["id"]
    assert targets(gate, rid) == {"log:finance", "log:everyone"}
    said = created(gate, rid)
    assert said["routes"] == ["by amount"]
    assert "route 'by amount': `when` failed" in said["route_failures"][0]
