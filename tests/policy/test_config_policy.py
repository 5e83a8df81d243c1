"""gate.toml loading, GATE_* overrides, policy evaluation, and the policy CLI."""

from __future__ import annotations

import json
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from gate.base.errors import ConfigError
from gate.config.settings import Settings, load_settings, parse_duration
from gate.policy.rules import CallFacts, Policy
from tests.support import config as cfg
from tests.support.cli import run_gate


def test_durations() -> None:
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("2d") == timedelta(days=2)
    assert parse_duration(5) == timedelta(seconds=5)
    for bad in ("", "10", "ten minutes", "5x", "-5m", "0s"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_env_overrides_scalars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(
        '[server]\ndatabase_url = "sqlite:///file.db"\nport = 9000\n'
        '[channels.slack]\nbot_token = "from-file"\n'
    )
    monkeypatch.setenv("GATE_SERVER__PORT", "9100")
    monkeypatch.setenv("GATE_CHANNELS__SLACK__BOT_TOKEN", "xoxb-from-env")
    settings = load_settings(path)
    assert settings.server.port == 9100
    assert settings.server.database_url == "sqlite:///file.db"
    assert settings.channels.configured()["slack"]["bot_token"] == "xoxb-from-env"
    assert "xoxb-from-env" not in repr(settings)


def test_config_from_gate_config_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "elsewhere.toml"
    path.write_text("[server]\nport = 9200\n")
    monkeypatch.setenv("GATE_CONFIG", str(path))
    assert load_settings().server.port == 9200


@pytest.mark.parametrize(
    "text, where, reason",
    [
        ("[server\n", "gate.toml", "not valid TOML"),
        ('[server]\nport = "eighty"\n', "server.port", "valid integer"),
        ('[server]\ndefault_timeout = "soon"\n', "server.default_timeout", "not a duration"),
        ("[serverr]\n", "gate.toml:1", 'unknown table "serverr"; did you mean "server"?'),
        ('[[rules]]\nname = "r"\naction = "maybe"\n', 'rule "r": action', "'deny' or 'ask'"),
        (
            '[[rules]]\nname = "r"\napprovers = ["zed"]\n',
            "",
            "approver 'zed' is not in [[approvers]]",
        ),
        ('[[tokens]]\nname = "t"\nrole = "agent"\n', 'token "t"', "exactly one of `token`"),
    ],
)
def test_bad_files_name_file_key_and_reason(
    tmp_path: Path, text: str, where: str, reason: str
) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert str(path) in message
    assert where in message
    assert reason in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_settings(tmp_path / "nope.toml")


def _policy(**extra: object) -> Policy:
    return Policy(Settings(**cfg.settings_data("sqlite://", **extra)))


def test_first_match_wins_and_globs() -> None:
    policy = _policy()
    assert policy.evaluate(CallFacts("db_write", {"env": "prod"})).rule.name == "deny-prod-writes"  # type: ignore[union-attr]
    assert policy.evaluate(CallFacts("db_write", {"env": "dev"})).action is None
    assert policy.evaluate(CallFacts("pay_vendor", {"amount": 50001})).action == "ask"
    assert policy.evaluate(CallFacts("pay_vendor", {"amount": 50000})).action is None
    # a variant of a name an ask rule names is asked about; an allow rule lets through only
    # the name as written (gate.policy.toolnames)
    assert policy.evaluate(CallFacts("PAY_vendor", {"amount": 60000})).action == "ask"
    assert policy.evaluate(CallFacts("read_x", {})).action == "allow"
    assert policy.evaluate(CallFacts("READ_x", {})).action is None


def test_when_sees_agent_user_and_metadata() -> None:
    data = cfg.settings_data("sqlite://")
    data["rules"] = [
        {
            "name": "night",
            "tools": ["*"],
            "action": "deny",
            "when": "agent_id == 'bot' && user_id.startsWith('ext-') && metadata.org == 'acme'",
        }
    ]
    policy = Policy(Settings(**data))
    hit = CallFacts("x", {}, agent_id="bot", user_id="ext-1", metadata={"org": "acme"})
    miss = CallFacts("x", {}, agent_id="bot", user_id="int-1", metadata={"org": "acme"})
    assert policy.evaluate(hit).action == "deny"
    assert policy.evaluate(miss).action is None


def test_allow_rules_skip_when_their_guard_fails() -> None:
    data = cfg.settings_data("sqlite://")
    data["rules"] = [
        {"name": "small", "tools": ["pay_*"], "action": "allow", "when": "args.amount < 100"},
        {"name": "rest", "tools": ["pay_*"], "action": "ask"},
    ]
    decision = Policy(Settings(**data)).evaluate(CallFacts("pay_x", {"note": "no amount"}))
    assert decision.rule is not None and decision.rule.name == "rest"
    assert "allow rules skip" in decision.trail[0]


def test_group_approvers_expand_in_order() -> None:
    policy = _policy()
    assert policy.expand_approvers(["group:finance", "carol", "alice"]) == ["alice", "bob", "carol"]


def test_a_channel_finds_approvers_by_a_declared_field_of_its_name() -> None:
    # `email` is a declared field of [[approvers]], not an extra key: the email channel still
    # maps a person by it, like Slack by `slack = "U0..."`; `name` is never a channel id.
    settings = cfg.make_settings("sqlite://")
    alice = settings.approver_by_identity("email", "alice@example.com")
    assert alice is not None and alice.name == "alice"
    assert settings.approver_by_identity("email", "ALICE@example.com") is None
    assert settings.approver_by_identity("slack", "U0BOB") is not None
    bob = settings.approver("bob")
    assert bob is not None and bob.identity("email") is None
    assert settings.approver_by_identity("name", "alice") is None
    assert settings.approver_by_identity("groups", "finance") is None


def _gate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_gate(*args, stdin=stdin)


def test_policy_check_and_explain(tmp_path: Path) -> None:
    path = cfg.write_config(tmp_path / "gate.toml", "sqlite://")
    ok = _gate("policy", "check", "--config", str(path))
    assert ok.returncode == 0
    assert "OK, 8 rule(s)" in ok.stdout
    payload = tmp_path / "call.json"
    payload.write_text(json.dumps({"tool_name": "pay_vendor", "tool_args": {"amount": 99000}}))
    explained = json.loads(_gate("policy", "explain", "--config", str(path), str(payload)).stdout)
    assert explained["decision"] == "ask"
    assert explained["rule"] == "big-payments"
    assert explained["trail"][-1] == (
        "big-payments: tool matches and `when` 'args.amount > 50000' is true"
    )
    via_stdin = _gate(
        "policy", "explain", "--config", str(path), "-", stdin='{"tool_name": "read_x"}'
    )
    assert json.loads(via_stdin.stdout)["rule"] == "reads"


def test_policy_check_reports_a_bad_rule(tmp_path: Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text('[[rules]]\nname = "oops"\nwhen = "args.x ==="\n')
    r = _gate("policy", "check", "--config", str(path))
    assert r.returncode == 1
    assert 'rule "oops"' in r.stderr and "not valid CEL" in r.stderr
    assert "Traceback" not in r.stderr
