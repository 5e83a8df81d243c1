"""Shadow rules (issue 31, item 5): tried beside the live policy, never changing an answer,
bounded by a required `until`, refused once it passed, said at start and on /metrics."""

from __future__ import annotations

import copy
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate.app import create_app
from gate.base.errors import ConfigError
from gate.cli import main
from gate.config.errors import located
from gate.config.settings import Settings, load_settings
from gate.policy import shadow
from gate.policy.rules import CallFacts, Policy
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
SOON = NOW + timedelta(days=14)


def _rules(*shadows: dict[str, Any]) -> list[dict[str, Any]]:
    """The live rules, with `shadows` placed before them (each says where with `_at`)."""
    live: list[dict[str, Any]] = [
        {"name": "reads", "tools": ["read_*"], "action": "allow"},
        {"name": "no-prod", "tools": ["db_*"], "when": "args.env == 'prod'", "action": "deny"},
        {"name": "pay", "tools": ["pay_*"], "when": "args.amount > 100"},
        {"name": "shell", "tools": ["shell_*"], "action": "allow"},
    ]
    for entry in shadows:
        entry = dict(entry)
        at = entry.pop("_at", 0)
        live.insert(at, {"mode": "shadow", "until": SOON, **entry})
    return live


def _policy(rules: list[dict[str, Any]], now: datetime = NOW) -> Policy:
    return Policy(Settings(rules=rules), wall=lambda: now)


CALLS = [
    CallFacts("read_file", {"path": "/etc/hosts"}),
    CallFacts("db_write", {"env": "prod"}),
    CallFacts("db_write", {"env": "dev"}),
    CallFacts("pay_vendor", {"amount": 500}),
    CallFacts("pay_vendor", {"amount": 5}),
    CallFacts("pay_vendor", {"amount": "lots"}),  # the live `when` fails: asked (fail closed)
    CallFacts("shell_run", {"cmd": "ls"}),
    CallFacts("Shell_run", {"cmd": "ls"}),  # a variant: allow rules do not match it
    CallFacts("unknown_tool", {}),
]
SHADOWS = [
    {"name": "ask-reads", "tools": ["read_*"], "action": "ask"},
    {"name": "deny-shell", "tools": ["shell_*"], "action": "deny", "_at": 3},
    {"name": "allow-pay", "tools": ["pay_*"], "action": "allow", "_at": 2},
    {"name": "ask-all", "tools": ["*"], "action": "ask", "when": "args.cmd == 'ls'", "_at": 4},
    {"name": "failing", "tools": ["*"], "action": "deny", "when": "args.nope.deeper == 1"},
]


@pytest.mark.parametrize("shadow_rule", SHADOWS, ids=[s["name"] for s in SHADOWS])
@pytest.mark.parametrize("facts", CALLS, ids=lambda f: f"{f.tool_name}-{f.args}")
def test_a_shadow_rule_never_changes_an_answer(shadow_rule: dict[str, Any], facts: Any) -> None:
    live = _policy(_rules()).evaluate(facts)
    tried = _policy(_rules(shadow_rule)).evaluate(facts)
    named = (tried.rule.name if tried.rule else None, live.rule.name if live.rule else None)
    assert named[0] == named[1]
    assert (tried.action, tried.reason, tried.trail) == (live.action, live.reason, live.trail)
    assert tried.condition_error == live.condition_error
    for outcome in tried.shadow:
        assert outcome.rule == shadow_rule["name"]
        assert outcome.flip == f"{live.action or 'allow'}->{outcome.would}"


def test_what_a_shadow_rule_would_have_answered() -> None:
    trial = {"mode": "shadow", "until": SOON}
    policy = _policy(
        [
            {"name": "failing", "action": "deny", "when": "args.nope.deeper == 1", **trial},
            {"name": "ask-reads", "tools": ["read_*"], **trial},
            {"name": "reads", "tools": ["read_*"], "action": "allow"},
            {"name": "no-prod", "tools": ["db_*"], "when": "args.env == 'prod'", "action": "deny"},
            {"name": "deny-shell", "tools": ["shell_*"], "action": "deny", **trial},
            {"name": "shell", "tools": ["shell_*"], "action": "allow"},
            {"name": "ask-all", "when": "args.cmd == 'ls'", **trial},
        ]
    )
    found = policy.evaluate(CallFacts("read_file", {})).shadow
    assert [o.as_dict() for o in found] == [
        # its `when` fails on every call: a deny rule matches when it fails (fail closed)
        {"rule": "failing", "would": "deny", "flip": "allow->deny"},
        {"rule": "ask-reads", "would": "ask", "flip": "allow->ask"},
    ]
    assert all(o.flipped for o in found)
    # a shadow rule placed after the rule that decided cannot change the call: not tried
    shell = policy.evaluate(CallFacts("shell_run", {"cmd": "ls"}))
    assert [o.rule for o in shell.shadow] == ["failing", "deny-shell"]
    # no live rule matched: every shadow rule is tried against the fallback answer (allow)
    unknown = policy.evaluate(CallFacts("unknown_tool", {"cmd": "ls"})).shadow
    assert {o.rule: o.flip for o in unknown} == {"failing": "allow->deny", "ask-all": "allow->ask"}
    # the same answer as the live one is recorded, not counted as a flip
    prod = policy.evaluate(CallFacts("db_write", {"env": "prod"})).shadow
    assert [(o.flip, o.flipped) for o in prod] == [("deny->deny", False)]


def test_a_shadow_rule_past_its_until_is_no_longer_tried_by_a_running_server() -> None:
    clock = {"now": NOW}
    policy = Policy(Settings(rules=_rules(SHADOWS[0])), wall=lambda: clock["now"])
    assert policy.evaluate(CallFacts("read_file", {})).shadow
    clock["now"] = SOON + timedelta(seconds=1)
    assert policy.evaluate(CallFacts("read_file", {})).shadow == ()
    (notice,) = shadow.notices(policy.shadows, clock["now"])
    assert notice.ended and notice.rule == "ask-reads"


def _toml(tmp_path: Path, until: str | None, mode: str = "shadow") -> Path:
    lines = ['[[rules]]\nname = "reads"\ntools = ["read_*"]\naction = "allow"\n']
    trial = f'\n[[rules]]\nname = "try-asking"\ntools = ["read_*"]\nmode = "{mode}"\n'
    if until is not None:
        trial += f"until = {until}\n"
    path = tmp_path / "gate.toml"
    path.write_text(trial + "\n" + lines[0])
    return path


def _load_error(path: Path) -> str:
    settings = load_settings(path)
    with pytest.raises(ConfigError) as caught:
        Policy(settings, wall=lambda: NOW)
    return str(located(caught.value))


@pytest.mark.parametrize(
    ("until", "mode", "line", "words"),
    [
        (None, "shadow", 2, "needs `until`"),
        ("2027-01-10T00:00:00Z", "shadow", 6, "more than 30 days away"),
        ("2026-11-20", "shadow", 6, "expired at 2026-11-20 00:00 UTC"),
        ("2026-12-01", "enforce", 6, "`until` is for shadow rules only"),
    ],
)
def test_an_unbounded_or_expired_shadow_rule_is_refused_with_its_line(
    tmp_path: Path, until: str | None, mode: str, line: int, words: str
) -> None:
    said = _load_error(_toml(tmp_path, until, mode))
    assert said.startswith(f'{tmp_path / "gate.toml"}:{line}: rule "try-asking":'), said
    assert words in said


def test_an_expired_shadow_rule_stops_the_server_and_policy_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    data = cfg.settings_data(sqlite_url)
    yesterday = datetime.now(UTC) - timedelta(days=1)
    data["rules"].insert(0, {"name": "old-trial", "mode": "shadow", "until": yesterday})
    with pytest.raises(ConfigError, match="shadow rule 'old-trial' expired at"):
        create_app(Settings(**data))
    path = _toml(tmp_path, "2026-11-01")
    assert main(["policy", "check", "--config", str(path)]) == 1
    assert "expired at 2026-11-01 00:00 UTC" in capsys.readouterr().err


def test_policy_check_and_explain_name_shadow_rules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    until = (datetime.now(UTC) + timedelta(days=3)).date().isoformat()
    path = _toml(tmp_path, until)
    assert main(["policy", "check", "--config", str(path)]) == 0
    out = capsys.readouterr()
    assert f"try-asking: ask ['read_*'] [SHADOW until {until} 00:00 UTC]" in out.out
    assert "never answer a call" in out.err
    payload = tmp_path / "call.json"
    payload.write_text('{"tool_name": "read_file", "tool_input": {}}')
    assert main(["policy", "explain", "--config", str(path), str(payload)]) == 0
    explained = capsys.readouterr().out
    assert '"decision": "allow"' in explained and '"rule": "reads"' in explained
    assert '"flip": "allow->ask"' in explained and '"would": "ask"' in explained


def _trial_settings(database_url: str) -> Settings:
    data = copy.deepcopy(cfg.settings_data(database_url))
    until = datetime.now(UTC) + timedelta(days=7)
    trial = {"name": "ask-reads", "tools": ["read_*"], "mode": "shadow", "until": until}
    data["rules"].insert(0, trial)
    return Settings(**data)


def test_the_server_answers_as_without_the_shadow_rule_and_counts_flips(
    make_gate: GateFactory, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gate.app"):
        gate: Gate = make_gate(settings=_trial_settings(db_url))
    said = [r.getMessage() for r in caplog.records if "SHADOW MODE" in r.getMessage()]
    assert said and "'ask-reads' until" in said[0]
    for n in range(3):
        answer = gate.submit(tool_name="read_file", tool_args={"n": n})
        assert (answer["decision"], answer["rule"]) == ("allow", "reads")
    asked = gate.submit(tool_name="ask_thing", tool_args={})
    assert asked["decision"] == "ask" and asked["rule"] == "anyone"
    metrics = httpx.get(f"{gate.url}/metrics").text
    assert 'gate_shadow_flips_total{flip="allow->ask",rule="ask-reads"} 3.0' in metrics


def test_policy_test_cases_can_assert_a_shadow_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    until = (datetime.now(UTC) + timedelta(days=3)).date().isoformat()
    policy = _toml(tmp_path, until)
    cases = tmp_path / "cases.toml"
    cases.write_text(
        '[[cases]]\nname = "reads stay allowed"\ntool = "read_file"\n'
        'expect = { decision = "allow", rule = "reads", shadow = { "try-asking" = "ask" } }\n'
        '\n[[cases]]\nname = "other tools meet no shadow rule"\ntool = "write_file"\n'
        'expect = { decision = "allow", shadow = {} }\n'
        '\n[[cases]]\nname = "a shadow rule never decides"\ntool = "read_file"\n'
        'expect = { decision = "ask", rule = "try-asking", shadow = { "try-asking" = "deny" } }\n'
    )
    assert main(["policy", "test", str(cases), "--config", str(policy)]) == 1
    out = capsys.readouterr().out
    assert "FAIL 'a shadow rule never decides'" in out
    assert "rule: expected 'try-asking' (a shadow rule: it never answers" in out
    assert "shadow: expected 'try-asking' would deny, got 'try-asking' would ask" in out
    assert "3 case(s), 2 passed, 1 failed" in out


def test_every_console_page_shows_the_banner(make_gate: GateFactory, sqlite_url: str) -> None:
    from tests.web.conftest import sign_in, web_settings

    settings = web_settings(sqlite_url)
    until = datetime.now(UTC) + timedelta(days=5)
    trial = {"name": "ask-reads", "tools": ["read_*"], "mode": "shadow", "until": until}
    settings = Settings(
        **{**settings.model_dump(), "rules": [trial, *settings.model_dump()["rules"]]}
    )
    gate = make_gate(settings=settings)
    asked = gate.submit(tool_name="ask_thing", tool_args={})["request"]["id"]
    expiry = shadow.shown(shadow.normalised_until(until) or until)
    with sign_in(gate, "alice") as c:
        for path in ("/", "/history", "/stats", "/grants", "/agents", f"/requests/{asked}"):
            page = c.get(path)
            assert page.status_code == 200, path
            banner = page.text.split('id="shadow-banner"')[1].split("</p>")[0]
            assert "<strong>ask-reads</strong>" in banner and expiry in banner, path
            assert "never change an answer" in banner
    # signed out, the sign-in page does not name the policy's rules
    assert 'id="shadow-banner"' not in httpx.get(f"{gate.url}/login").text
