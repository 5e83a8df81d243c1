"""History terms in gate.toml (issue 32, item 8): refused at load with file:line when the window
is missing, too long or not a literal; supplied by `gate policy test` cases; shown with their
values by `gate policy explain` (from the payload, or from the database for a caller)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gate.base.statuses import utcnow
from gate.store import counted
from gate.store.db import Database, upgrade
from tests.support.cli import gate_in_process, run_gate

POLICY = """\
[server]
database_url = "sqlite:///{db}"

[[tokens]]
name = "payments-bot"
role = "agent"
token = "tok-payments-bot-0123456789"

[[approvers]]
name = "alice"
groups = ["finance"]

[[rules]]
name = "daily-budget"
tools = ["pay_*"]
when = 'history.sum("pay_*", "amount", "24h") + args.amount > 100000'
approvers = ["group:finance"]

[[rules]]
name = "payments"
tools = ["pay_*"]
action = "allow"

[[rules]]
name = "deploy-rate"
tools = ["deploy_*"]
when = {deploy_when}
action = "deny"
"""
GOOD_DEPLOY = """'history.count("deploy_*", "1h") >= 3'"""


def _gate(
    *args: str | Path, cwd: Path, stdin: str | None = None, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """`gate ARGS` in `cwd` (also its HOME) with no $GATE_CONFIG: called in this process, or
    with `process` the real command."""
    run = run_gate if process else gate_in_process
    result = run(*args, cwd=cwd, env={"HOME": str(cwd)}, stdin=stdin, unset=["GATE_CONFIG"])
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _policy(tmp_path: Path, deploy_when: str = GOOD_DEPLOY) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(POLICY.format(db=tmp_path / "gate.db", deploy_when=deploy_when))
    return path


@pytest.mark.parametrize(
    ("when", "words"),
    [
        ("""'history.count("deploy_*") >= 3'""", "a window is mandatory"),
        ("""'history.count("deploy_*", "48h") >= 3'""", "longer than server.history_max_window"),
        ("""'history.count(tool_name, "1h") >= 3'""", "takes string literals"),
        ("""'history.total("deploy_*", "1h") >= 3'""", "is not a history function"),
        ("""'history.count("deploy_*", "soon") >= 3'""", "is not a duration"),
    ],
)
def test_a_bad_term_is_refused_at_load_with_file_and_line(
    tmp_path: Path, when: str, words: str
) -> None:
    path = _policy(tmp_path, when)
    result = _gate("policy", "check", "--config", path, cwd=tmp_path)
    assert result.returncode == 1
    assert f'{path}:27: rule "deploy-rate"' in result.stderr, result.stderr
    assert words in result.stderr


def test_the_cap_is_a_setting(tmp_path: Path) -> None:
    path = _policy(tmp_path, """'history.count("deploy_*", "48h") >= 3'""")
    path.write_text(path.read_text().replace("[server]\n", '[server]\nhistory_max_window = "2d"\n'))
    assert _gate("policy", "check", "--config", path, cwd=tmp_path).returncode == 0


def test_cases_supply_history_and_a_term_no_rule_reads_is_a_miss(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    cases = tmp_path / "gate.cases.toml"
    cases.write_text(
        """\
[[cases]]
name = "a payment within the day's budget runs"
tool = "pay_card"
args = { amount = 5000 }
history = { 'history.sum("pay_*", "amount", "24h")' = 90000 }
expect = { decision = "allow", rule = "payments" }

[[cases]]
name = "one that passes it is asked"
tool = "pay_card"
args = { amount = 20000 }
history = { 'history.sum( "pay_*","amount","1440m" )' = 90000 }
expect = { decision = "ask", rule = "daily-budget" }

[[cases]]
name = "no past: the fourth deploy is not reached"
tool = "deploy_web"
expect = { decision = "allow" }

[[cases]]
name = "the fourth deploy within the hour is denied"
tool = "deploy_web"
history = { 'history.count("deploy_*", "60m")' = 3 }
expect = { decision = "deny", rule = "deploy-rate" }

[[cases]]
name = "a typo in a term"
tool = "deploy_web"
history = { 'history.count("deploy*", "1h")' = 3 }
expect = { decision = "allow" }
"""
    )
    result = _gate("policy", "test", "--config", policy, cases, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "5 case(s), 4 passed, 1 failed" in result.stdout
    assert "FAIL 'a typo in a term'" in result.stdout
    assert 'history: expected history.count("deploy*", "1h") read by a rule' in result.stdout


def test_explain_shows_each_term_and_its_value(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    term = 'history.sum("pay_*", "amount", "24h")'
    body = {"tool_name": "pay_card", "tool_args": {"amount": 8000}, "history": {term: 95000}}
    # the real command once: the payload read from its stdin
    shown = _gate(
        "policy",
        "explain",
        "--config",
        policy,
        "-",
        cwd=tmp_path,
        stdin=json.dumps(body),
        process=True,
    )
    assert shown.returncode == 0, shown.stderr
    answer = json.loads(shown.stdout)
    assert (answer["decision"], answer["history"]) == ("ask", {term: 95000})
    assert f"daily-budget: {term} = 95000" in answer["trail"]
    # from the database: the calls the named token made
    url = f"sqlite:///{tmp_path / 'gate.db'}"
    upgrade(url)
    db = Database(url)
    try:
        with db.write_conn() as conn:
            for amount in (40000, 55000):
                counted.record(
                    conn,
                    caller="payments-bot",
                    session_id=None,
                    tool_name="pay_card",
                    args={"amount": amount},
                    request_id=None,
                    at=utcnow(),
                )
    finally:
        db.dispose()
    body = {"tool_name": "pay_card", "tool_args": {"amount": 8000}, "caller": "payments-bot"}
    read = _gate("policy", "explain", "--config", policy, "-", cwd=tmp_path, stdin=json.dumps(body))
    assert json.loads(read.stdout)["history"] == {term: 95000}
    # neither: the rule fails closed, and says so
    body = {"tool_name": "pay_card", "tool_args": {"amount": 1}}
    blind = _gate(
        "policy", "explain", "--config", policy, "-", cwd=tmp_path, stdin=json.dumps(body)
    )
    answer = json.loads(blind.stdout)
    assert answer["decision"] == "ask"
    assert "could not read the call history" in answer["condition_error"]
