"""`gate log`, the policy revision (stable across key order and whitespace, changed by a rule
change; printed by `gate policy check` and at start) and where a request shows it."""

from __future__ import annotations

import json
from pathlib import Path

from gate.config.settings import Settings
from gate.policy.revision import revision
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.cli import gate_in_process, run_gate
from tests.support.servers import wait_until


def test_gate_log_lists_answers_over_the_api(gate_sqlite: Gate) -> None:
    gate_sqlite.submit(tool_name="read_file", tool_args={"path": "/a"}, agent_id="reader")
    gate_sqlite.submit(tool_name="db_write", tool_args={"env": "prod"}, agent_id="writer")
    log = gate_sqlite.state.decision_log
    assert log is not None
    wait_until(lambda: log.written >= 2)
    where = ["--url", gate_sqlite.url, "--token", cfg.ADMIN]
    # the real command once: `gate log`'s entry point, exit status and stdio
    table = run_gate("log", *where)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "AT",
        "(UTC)",
        "ANSWER",
        "TOOL",
        "ARGUMENTS",
        "AGENT",
        "RULE",
        "REVISION",
        "REQUEST",
    ]
    assert "deny" in lines[2] and "db_write" in lines[2] and "deny-prod-writes" in lines[2]
    assert "allow" in lines[3] and gate_sqlite.state.policy.revision in lines[3]
    denied = gate_in_process("log", "--answer", "deny", "--json", *where)
    assert [r["tool_name"] for r in json.loads(denied.stdout)] == ["db_write"]
    recent = gate_in_process("log", "--since", "1h", "--agent", "reader", "--json", *where)
    assert [r["agent_id"] for r in json.loads(recent.stdout)] == ["reader"]
    none = gate_in_process("log", "--until", "2000-01-01", *where)
    assert none.stdout.startswith("no decisions match")
    bad = gate_in_process("log", "--since", "soon", *where)
    assert bad.returncode == 1 and "neither a duration" in bad.stderr
    agent = gate_in_process("log", "--url", gate_sqlite.url, "--token", cfg.AGENT)
    assert agent.returncode == 1 and "403 wrong_role" in agent.stderr


def test_the_revision_is_stable_and_follows_the_rules() -> None:
    data = cfg.settings_data("sqlite:///:memory:")
    first = revision(Settings(**data))
    reordered = cfg.settings_data("sqlite:///:memory:")
    reordered["rules"] = [dict(reversed(list(rule.items()))) for rule in reordered["rules"]]
    reordered["rules"][1]["action"] = "allow"  # as written already
    reordered["rules"][2]["on_timeout"] = "reject"  # the default, spelled out
    assert revision(Settings(**reordered)) == first
    changed = cfg.settings_data("sqlite:///:memory:")
    changed["rules"][2]["when"] = "args.amount > 40000"
    assert revision(Settings(**changed)) != first
    swapped = cfg.settings_data("sqlite:///:memory:")
    swapped["rules"][0], swapped["rules"][1] = swapped["rules"][1], swapped["rules"][0]
    assert revision(Settings(**swapped)) != first  # first match wins: order is policy
    assert len(first) == 12 and int(first, 16) >= 0


def test_policy_check_and_the_start_say_the_revision(tmp_path: Path) -> None:
    path = cfg.write_config(tmp_path / "gate.toml", f"sqlite:///{tmp_path}/gate.db")
    spaced = tmp_path / "spaced.toml"
    spaced.write_text(path.read_text().replace(" = ", "   =   "))
    expected = revision(Settings(**cfg.settings_data(f"sqlite:///{tmp_path}/gate.db")))
    for config in (path, spaced):
        checked = gate_in_process("policy", "check", "--config", config)
        assert checked.returncode == 0, checked.stderr
        assert f"policy revision {expected}" in checked.stdout.splitlines()[0]


def test_a_request_shows_its_revision_everywhere(gate_sqlite: Gate) -> None:
    asked = gate_sqlite.submit(tool_name="ask_x", tool_args={})["request"]
    expected = gate_sqlite.state.policy.revision
    assert asked["policy_revision"] == expected
    shown = gate_in_process(
        "requests", "show", asked["id"], "--url", gate_sqlite.url, "--token", cfg.ADMIN
    )
    assert any(
        line.split() == ["policy_revision", expected] for line in shown.stdout.splitlines()
    ), shown.stdout
    with gate_sqlite.client(cfg.ADMIN) as client:
        trail = client.get(f"/v1/requests/{asked['id']}/audit").json()
    assert trail[0]["detail"]["policy_revision"] == expected
    assert trail[0]["detail"]["rule"] == "anyone"
