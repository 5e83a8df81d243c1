"""A chain that cannot work is refused when gate.toml is read, by `gate policy check`,
naming the file, the line and the rule; `gate policy explain` shows stages and thresholds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import gate_in_process

APPROVERS = """
[[approvers]]
name = "alice"
groups = ["finance"]

[[approvers]]
name = "bob"
groups = ["finance"]

[[approvers]]
name = "carol"
groups = ["leads"]
"""
#: line 14 is the `[[rules]]` header; what a test adds begins at line 17
RULE = (
    APPROVERS
    + """
[[rules]]
name = "payments"
tools = ["pay_*"]
"""
)


def _gate(tmp_path: Path, toml: str, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`gate ARGS --config <file with toml>` in `tmp_path`, called in this process (the real
    `gate policy check` and `explain` processes are tested in tests/policy)."""
    path = tmp_path / "gate.toml"
    path.write_text(toml)
    return gate_in_process(*args, "--config", path, cwd=tmp_path), path


@pytest.mark.parametrize(
    ("tail", "line", "says"),
    [
        # an approver name that is nobody: the stage's own line
        (
            '\n[[rules.stages]]\napprovers = ["carol"]\n\n[[rules.stages]]\napprovers = ["dave"]\n',
            22,
            "approver 'dave' is not in [[approvers]]",
        ),
        # a stage nobody could decide: an empty group and no fallback
        (
            '\n[[rules.stages]]\napprovers = ["group:auditors"]\n',
            19,
            "stage 1: nobody could decide it",
        ),
        # more approvals than the stage has people who count
        (
            '\n[[rules.stages]]\nname = "finance"\napprovers = ["group:finance"]\n'
            "votes = { approve = 3 }\n",
            21,
            "stage 1 (finance) needs 3 approvals, but only 2 of its approvers can give one",
        ),
        # a rule-level key that belongs in a stage
        (
            'approvals_required = 2\n\n[[rules.stages]]\napprovers = ["carol"]\n',
            17,
            "`approvals_required` is set in each [[rules.stages]] entry",
        ),
        (
            'on_timeout = "approve"\n\n[[rules.stages]]\napprovers = ["carol"]\n',
            17,
            'on_timeout = "approve" cannot go with stages',
        ),
        (
            'votes = { approve = 2, groups = ["nobody"] }\n',
            17,
            "group 'nobody' has no members",
        ),
    ],
)
def test_a_chain_that_cannot_work_is_named_by_its_line(
    tmp_path: Path, tail: str, line: int, says: str
) -> None:
    r, path = _gate(tmp_path, RULE + tail, "policy", "check")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    said = r.stderr.strip().splitlines()[0]
    assert said.startswith(f'gate: policy error: {path}:{line}: rule "payments": '), said
    assert says in said, said


def test_more_than_five_stages_is_a_configuration_error(tmp_path: Path) -> None:
    stages = '\n[[rules.stages]]\napprovers = ["carol"]\n' * 6
    r, path = _gate(tmp_path, RULE + stages, "policy", "check")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    said = r.stderr.strip().splitlines()[-1]
    assert f'{path}:18: rule "payments": stages: List should have at most 5 items' in said


def test_policy_explain_shows_stages_and_thresholds(tmp_path: Path) -> None:
    toml = RULE + (
        'justification = "required"\n\n[[rules.stages]]\nname = "lead"\n'
        'approvers = ["group:auditors"]\nfallback_approvers = ["carol"]\ntimeout = "30m"\n'
        '\n[[rules.stages]]\nname = "finance"\napprovers = ["group:finance"]\n'
        'votes = { approve = 2, reject = 2, via = ["web"] }\nescalate_after = "10m"\n'
        'escalate_approvers = ["carol"]\n'
    )
    (tmp_path / "call.json").write_text(json.dumps({"tool_name": "pay_vendor"}))
    r, _ = _gate(tmp_path, toml, "policy", "explain", str(tmp_path / "call.json"))
    assert r.returncode == 0, r.stderr
    said = json.loads(r.stdout)["decided_by"]
    lead, finance = said["stages"]
    assert lead["stage"] == "stage 1 of 2 (lead)" and lead["approvers"] == ["carol"]
    assert lead["fallback"] is True and lead["denies_after"] == "1800s"
    assert (finance["approvals_needed"], finance["rejections_needed"]) == (2, 2)
    assert finance["votes_count_from"]["surfaces"] == ["web"]
    assert finance["escalate_after"] == "600s" and finance["escalate_to"] == ["carol"]
    assert said["justification"] == "required" and said["self_approval"] == "refused"
    # a rule without stages: one stage, the rule's own approvers and thresholds
    plain = APPROVERS + '\n[[rules]]\nname = "r"\ntools = ["x"]\napprovers = ["group:finance"]\n'
    (tmp_path / "x.json").write_text(json.dumps({"tool_name": "x"}))
    r, _ = _gate(tmp_path, plain, "policy", "explain", str(tmp_path / "x.json"))
    only = json.loads(r.stdout)["decided_by"]["stages"]
    assert [(s["approvers"], s["approvals_needed"], s["rejections_needed"]) for s in only] == [
        (["alice", "bob"], 1, 1)
    ]


def test_every_example_on_the_approval_chains_page_loads() -> None:
    import re
    import tomllib

    from gate.config.settings import Settings
    from gate.policy.rules import Policy

    page = (Path(__file__).parents[2] / "docs" / "approval-chains.md").read_text()
    people, *examples = re.findall(r"```toml\n(.*?)```", page, re.S)
    assert len(examples) == 4
    for example in examples:
        data = tomllib.loads(people + example)
        Policy(Settings(**data))  # raises on any problem
