"""A shadow rule adds no statement to a call, on SQLite and PostgreSQL (gate.policy.shadow)."""

from __future__ import annotations

from datetime import timedelta

from gate.inputs.bodies import GateCall
from tests.core.conftest import AGENT, Clock, service_of
from tests.support import config as cfg
from tests.support.sql_counter import counting


def test_a_shadow_rule_adds_no_statement(db_url: str, clock: Clock) -> None:
    data = cfg.settings_data(db_url)
    trial = {"mode": "shadow", "until": clock() + timedelta(days=3)}
    data["rules"][0:0] = [
        {"name": "ask-reads", "tools": ["read_*"], "when": "args.path == '/etc'", **trial},
        {"name": "allow-asks", "tools": ["ask_*"], "action": "allow", **trial},
    ]
    service = service_of(data, clock)
    service.policy.wall = clock
    seen: list[object] = []
    service.on_shadow = seen.append
    try:
        call = GateCall(tool_name="read_file", tool_args={"path": "/etc"})
        with counting(service.db.engine) as tally:
            assert service.submit(call, AGENT).decision.action == "allow"
        assert (tally.count, tally.transactions) == (0, 0), str(tally)
        asked = GateCall(tool_name="ask_thing", tool_args={})
        with counting(service.db.engine) as plain:
            assert service.submit(asked, AGENT).decision.action == "ask"
        assert plain.count == (2 if service.db.sqlite else 1), str(plain)  # as without it
        assert [[o.flip for o in found] for found in seen] == [["allow->ask"], ["ask->allow"]]
    finally:
        service.db.dispose()
