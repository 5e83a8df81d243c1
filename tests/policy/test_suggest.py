"""`gate policy suggest`: rules from history, and never one that allows what someone refused.

Each test writes history into a real database (SQLite, and PostgreSQL when configured) and
reads it back through the store. The proposals' TOML is loaded by gate's own config loader
and compiled by gate's own policy; the safety tests ask that policy about the refused calls.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gate.base.statuses import new_id
from gate.config.settings import Settings, load_settings
from gate.insights.suggest import Suggestions, from_history
from gate.policy.rules import CallFacts, Policy
from gate.store import history
from gate.store.db import Database
from gate.store.tables import ConfirmationRequest, Vote
from tests.support.cli import gate_in_process, run_gate
from tests.support.traffic import week_of_traffic

NOW = datetime.now(UTC).replace(microsecond=0)
PUSH = {"repo": "api", "branch": "main"}


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """The migrated test database, opened as gate opens it."""
    database = Database(db_url)
    yield database
    database.dispose()


def _decided(
    db: Database,
    tool: str,
    args: dict[str, Any],
    votes: list[tuple[str, str]],
    *,
    at: datetime,
    agent: str = "claude-code",
    edited: dict[str, Any] | None = None,
) -> str:
    """One decided request with its votes (status from the votes: any reject rejects)."""
    status = "rejected" if any(v == "reject" for _, v in votes) else "approved"
    request_id = new_id()
    row = {
        "id": request_id,
        "tool_name": tool,
        "tool_args": args,
        "agent_id": agent,
        "context": {},
        "rule": "agent-tools",
        "status": status,
        "approvers": [],
        "approvals_required": 1,
        "created_at": at,
        "expires_at": at + timedelta(minutes=15),
        "decided_at": at + timedelta(seconds=30),
        "decided_by": votes[-1][0],
        "decided_via": "web",
        "on_timeout": "reject",
        "options": {},
        "approved_args": edited,
    }
    with db.write_conn() as conn:
        conn.execute(sa.insert(ConfirmationRequest), [row])
        conn.execute(
            sa.insert(Vote),
            [
                {"request_id": request_id, "approver": who, "verdict": v, "via": "web", "at": at}
                for who, v in votes
            ],
        )
    return request_id


def _pushes(db: Database, n: int = 6) -> list[str]:
    """`n` approvals of the same push, alternately by alice and bob."""
    people = ["alice", "bob"]
    return [
        _decided(
            db, "git_push", PUSH, [(people[i % 2], "approve")], at=NOW - timedelta(hours=i + 1)
        )
        for i in range(n)
    ]


def _suggest(db: Database, *, days: int = 7, need: int = 5) -> Suggestions:
    return from_history(db, now=NOW, window=timedelta(days=days), min_approvals=need)


def _allows(found: Suggestions, tool: str, args: dict[str, Any], agent: str) -> bool:
    """Would the proposed rules, all adopted, allow this call?"""
    text = "\n".join(p.toml for p in found.proposals)
    policy = Policy(Settings(**tomllib.loads(text)))
    return policy.evaluate(CallFacts(tool, args, agent, None)).action == "allow"


# -- what is proposed -------------------------------------------------------------------------


def test_a_week_of_traffic_gives_the_expected_rules(db: Database) -> None:
    week_of_traffic(db, now=NOW)
    found = _suggest(db)
    proposed = {(p.kind, p.tool, p.when) for p in found.proposals}
    assert proposed == {
        ("allow", "git_push", 'has(args.branch) && args.branch == "main" && '
         'has(args.repo) && args.repo == "api"'),
        ("allow", "Bash", 'has(args.command) && args.command == "npm test"'),
        ("allow", "deploy_api", 'has(args.env) && args.env == "staging"'),
        ("deny", "db_drop", 'has(args.env) && args.env == "prod"'),
    }  # fmt: skip
    push = next(p for p in found.proposals if p.tool == "git_push")
    assert push.people == ("alice", "bob")
    assert push.per_day == pytest.approx(push.covered / 7)
    assert len(push.last) == 5
    assert push.last[0].at >= push.last[-1].at  # newest first
    assert push.asked_under == ("agent-tools",)
    # payments were sometimes rejected whatever the vendor: never proposed, and said why
    assert not any(p.tool == "pay_invoice" and p.kind == "allow" for p in found.proposals)
    assert any(b.startswith('allow pay_invoice(vendor="acme")') for b in found.blocked)
    # prod deploys were approved by alice alone: two people must agree
    assert any("deploy_api" in b and "two people" in b for b in found.blocked)
    assert found.lost_by_rule()["agent-tools"] == sum(
        p.covered for p in found.proposals if p.asked_under == ("agent-tools",)
    )


def test_every_snippet_loads_with_gates_config_loader(db: Database, tmp_path: Path) -> None:
    week_of_traffic(db, now=NOW)
    found = _suggest(db)
    assert found.proposals
    for proposal in found.proposals:
        path = tmp_path / f"{proposal.name}.toml"
        path.write_text(proposal.toml, encoding="utf-8")
        settings = load_settings(path)
        (rule,) = settings.rules
        assert (rule.name, rule.action, rule.when) == (proposal.name, proposal.kind, proposal.when)
        Policy(settings)  # compiles: no problem, no warning that would stop `gate serve`


def test_no_proposal_allows_any_call_someone_refused(db: Database) -> None:
    week_of_traffic(db, now=NOW)
    found = _suggest(db, need=2)
    refused = [
        c for c in history.decided_calls(db, since=None) if c.status == "rejected" or c.edited
    ]
    assert refused
    for call in refused:
        assert not _allows(found, call.tool_name, call.tool_args, call.agent_id or ""), call


# -- what blocks or narrows a proposal ----------------------------------------------------------


def test_a_rejected_call_the_when_matches_blocks_the_proposal(db: Database) -> None:
    _pushes(db)
    assert [p.tool for p in _suggest(db).proposals] == ["git_push"]
    # the same call, by the same agent, rejected once: the push is never proposed again
    rejected = _decided(db, "git_push", PUSH, [("carol", "reject")], at=NOW - timedelta(hours=9))
    found = _suggest(db)
    assert found.proposals == []
    assert any(rejected in reason for reason in found.blocked), found.blocked
    assert not _allows(found, "git_push", PUSH, "claude-code")


def test_a_rejection_from_another_agent_narrows_the_rule_to_the_approved_agent(
    db: Database,
) -> None:
    _pushes(db)
    _decided(
        db, "git_push", PUSH, [("carol", "reject")], at=NOW - timedelta(hours=9), agent="intern"
    )
    (proposal,) = _suggest(db).proposals
    assert proposal.when.endswith('&& agent_id == "claude-code"')
    found = _suggest(db)
    assert _allows(found, "git_push", PUSH, "claude-code")
    assert not _allows(found, "git_push", PUSH, "intern")


def test_a_rejection_before_the_window_still_blocks(db: Database) -> None:
    _pushes(db)
    _decided(db, "git_push", PUSH, [("carol", "reject")], at=NOW - timedelta(days=200))
    assert _suggest(db, days=7).proposals == []


def test_an_approval_only_after_editing_the_arguments_blocks_too(db: Database) -> None:
    _pushes(db)
    _decided(
        db,
        "git_push",
        PUSH,
        [("carol", "approve")],
        at=NOW - timedelta(hours=9),
        edited={"repo": "api", "branch": "release"},
    )
    found = _suggest(db)
    assert found.proposals == []
    assert any("after an edit" in reason for reason in found.blocked)


def test_one_persons_approvals_are_not_enough(db: Database) -> None:
    for i in range(8):
        _decided(db, "git_push", PUSH, [("alice", "approve")], at=NOW - timedelta(hours=i + 1))
    found = _suggest(db)
    assert found.proposals == []
    assert any("two people must agree" in reason for reason in found.blocked)


def test_fewer_approvals_than_asked_for_propose_nothing(db: Database) -> None:
    _pushes(db, n=4)
    assert _suggest(db, need=5).proposals == []
    assert len(_suggest(db, need=4).proposals) == 1


def test_a_value_that_varies_is_not_pinned(db: Database) -> None:
    for i in range(6):
        args = {"repo": "api", "message": f"fix {i}"}
        _decided(db, "git_push", args, [(["alice", "bob"][i % 2], "approve")], at=NOW)
    (proposal,) = _suggest(db).proposals
    assert proposal.when == 'has(args.repo) && args.repo == "api"'


def test_odd_keys_and_values_are_quoted_so_the_rule_still_loads(db: Database) -> None:
    args = {"the path": 'C:\\dir "quoted" é', "in": True, "n": 7}
    for i in range(6):
        _decided(db, "write_file", args, [(["alice", "bob"][i % 2], "approve")], at=NOW)
    (proposal,) = _suggest(db).proposals
    assert '"the path" in args' in proposal.when
    assert _allows(_suggest(db), "write_file", args, "claude-code")
    assert not _allows(_suggest(db), "write_file", {**args, "n": 8}, "claude-code")


# -- the command ------------------------------------------------------------------------------


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(f'[server]\ndatabase_url = "{url}"\n', encoding="utf-8")
    return path


def test_the_command_prints_toml_that_loads_and_json_for_scripts(
    db: Database, db_url: str, tmp_path: Path
) -> None:
    week_of_traffic(db, now=NOW)
    config = _config(tmp_path, db_url)
    done = gate_in_process("policy", "suggest", "--config", config, "--since", "8d")
    assert done.returncode == 0, done.stderr
    report = tomllib.loads(done.stdout)  # all but the rules is comments
    assert {r["action"] for r in report["rules"]} == {"allow", "deny"}
    assert "# Nothing is applied" in done.stdout
    pasted = tmp_path / "pasted.toml"
    pasted.write_text(done.stdout, encoding="utf-8")
    Policy(load_settings(pasted))
    done = gate_in_process("policy", "suggest", "-c", config, "--json", "--min-approvals", "3")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["min_approvals"] == 3
    assert {p["tool"] for p in data["proposals"]} >= {"git_push", "Bash", "db_drop"}
    assert all(p["last"] and p["asks_per_day"] > 0 for p in data["proposals"])


def test_the_command_refuses_bad_input_with_exit_2(tmp_path: Path) -> None:
    config = _config(tmp_path, f"sqlite:///{tmp_path}/missing.db")
    # the real command once: its entry point, exit status and stdio
    done = run_gate("policy", "suggest", "-c", config)
    assert done.returncode == 2
    assert "gate:" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "missing.db").exists()
    for bad in (["--since", "soon"], ["--min-approvals", "1"]):
        done = gate_in_process("policy", "suggest", "-c", config, *bad)
        assert done.returncode == 2, bad
        assert "Traceback" not in done.stderr


def test_a_hostile_tool_name_cannot_add_lines_to_the_report(
    db: Database, db_url: str, tmp_path: Path
) -> None:
    tool = 'evil\nreason = "x"\nwhen = "true"\n#\x01'
    for i in range(6):
        _decided(db, tool, {"a": 1}, [(["alice", "bob"][i % 2], "approve")], at=NOW)
    globbed = 'evil\n[[rules]]\ntools = ["*"]'
    for i in range(6):
        _decided(db, globbed, {"a": 1}, [(["alice", "bob"][i % 2], "approve")], at=NOW)
    done = gate_in_process("policy", "suggest", "-c", _config(tmp_path, db_url), "--since", "1d")
    assert done.returncode == 0, done.stderr
    (rule,) = tomllib.loads(done.stdout)["rules"]  # only the proposal: nothing injected
    assert rule["tools"] == [tool]
    assert rule["action"] == "allow" and rule["when"] == "has(args.a) && args.a == 1"
    # a name with glob characters is held back, and said so
    assert "its name has glob characters" in done.stdout


def test_secrets_are_never_pinned(db: Database) -> None:
    args = {"api_key": "plain-looking", "token_hint": "ghp_" + "a" * 36, "repo": "api"}
    for i in range(6):
        _decided(db, "call_api", args, [(["alice", "bob"][i % 2], "approve")], at=NOW)
    (proposal,) = _suggest(db).proposals
    assert proposal.when == 'has(args.repo) && args.repo == "api"'
    assert "ghp_" not in proposal.toml and "plain-looking" not in proposal.toml
