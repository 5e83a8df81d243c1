"""`gate policy test` and `gate policy lint`, run as the CLI (exit codes and wording), and
the promise behind them: a case is decided exactly as the running server decides the call."""

from __future__ import annotations

import copy
import fnmatch
import itertools
import json
import random
import subprocess
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from gate.config.settings import Settings
from gate.policy import globs
from tests.conftest import GateFactory
from tests.support import config as cfg
from tests.support.cli import gate_in_process, run_gate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_POLICY = ROOT / "examples" / "gate.toml"
EXAMPLE_CASES = ROOT / "examples" / "gate.cases.toml"


def _gate(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI, called in this process, in `cwd` with an empty home (gate's agent hooks are
    looked for in both: lint reports tools they never send)."""
    result = gate_in_process(*args, cwd=cwd, env={"HOME": str(cwd / "home")}, unset=UNSET)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def _gate_process(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`_gate` as the real command: its entry point, exit status and stdio."""
    result = run_gate(*args, cwd=cwd, env={"HOME": str(cwd / "home")}, unset=UNSET)
    assert "Traceback" not in result.stderr, result.stderr
    return result


#: where gate would look for a policy or Codex's hooks besides the test's own files
UNSET = ("CODEX_HOME", "GATE_CONFIG")


def _toml(value: Any) -> str:
    """A value as TOML (inline tables for dicts; strings, numbers and lists as JSON has them)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def _cases(path: Path, *cases: dict[str, Any]) -> Path:
    lines = []
    for case in cases:
        lines.append("[[cases]]")
        lines.extend(f"{key} = {_toml(value)}" for key, value in case.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def _policy(path: Path, *rules: dict[str, Any], **top: Any) -> Path:
    """A gate.toml with these rules (and the standard approvers)."""
    data = {"approvers": copy.deepcopy(cfg.BASE["approvers"]), **top, "rules": list(rules)}
    path.write_text(cfg.to_toml(data))
    return path


# -- gate policy test -----------------------------------------------------------------------


def test_the_example_cases_pass_against_the_example_policy(tmp_path: Path) -> None:
    r = _gate_process("policy", "test", "--config", EXAMPLE_POLICY, EXAMPLE_CASES, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("12 case(s), 12 passed, 0 failed")
    assert "FAIL" not in r.stdout


def test_a_miss_prints_expected_and_got_and_exits_1(tmp_path: Path) -> None:
    cases = _cases(
        tmp_path / "cases.toml",
        {
            "name": "ls runs",
            "tool": "Bash",
            "args": {"command": "ls"},
            "expect": {"decision": "allow"},
        },
        {
            "name": "rm should be denied",
            "tool": "Bash",
            "args": {"command": "rm -rf /"},
            "expect": {"decision": "deny", "rule": "no-rm", "approvers": ["alice"]},
        },
        {
            "name": "a push is allowed",
            "tool": "Bash",
            "args": {"command": "git push"},
            "expect": {"decision": "allow", "rule": ""},
        },
    )
    r = _gate("policy", "test", "--config", EXAMPLE_POLICY, cases, cwd=tmp_path)
    assert r.returncode == 1
    out = r.stdout
    assert f"FAIL 'rm should be denied' ({cases}, case 2)" in out
    assert "  decision: expected deny, got ask" in out
    assert "  rule: expected 'no-rm' (the policy has no rule by that name), got 'risky-bash'" in out
    assert "  approvers: expected ['alice'], got none" in out
    assert f"FAIL 'a push is allowed' ({cases}, case 3)" in out
    assert "  rule: expected no rule, got 'risky-bash'" in out
    assert "how policy decided: risky-bash: tool matches and `when`" in out
    assert "ls runs" not in out  # passing cases are not listed
    assert out.strip().endswith("3 case(s), 1 passed, 2 failed")


def test_approvers_and_grant_scopes_are_checked(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path / "gate.toml",
        {
            "name": "payments",
            "tools": ["pay_*"],
            "approvers": ["group:finance", "carol"],
            "grant_scopes": ["session", "call"],
        },
    )
    call = {"tool": "pay_vendor", "args": {"amount": 5}, "agent": "billing", "user": "u1"}
    cases = _cases(
        tmp_path / "cases.toml",
        {
            **call,
            "name": "finance and carol, session or call",
            "expect": {
                "decision": "ask",
                "rule": "payments",
                # order means nothing: both are compared as sets
                "approvers": ["carol", "bob", "alice"],
                "grant_scopes": ["call", "session"],
            },
        },
        {
            **call,
            "name": "wrong people and scopes",
            "expect": {"decision": "ask", "approvers": ["alice"], "grant_scopes": ["agent"]},
        },
    )
    r = _gate("policy", "test", "--config", policy, cases, cwd=tmp_path)
    assert r.returncode == 1
    assert "finance and carol" not in r.stdout
    assert "  approvers: expected ['alice'], got ['alice', 'bob', 'carol']" in r.stdout
    assert "  grant_scopes: expected ['agent'], got ['call', 'session']" in r.stdout


def test_junit_report(tmp_path: Path) -> None:
    cases = _cases(
        tmp_path / "cases.toml",
        {
            "name": "ls runs",
            "tool": "Bash",
            "args": {"command": "ls"},
            "expect": {"decision": "allow"},
        },
        {
            "name": "rm runs",
            "tool": "Bash",
            "args": {"command": "rm x"},
            "expect": {"decision": "allow"},
        },
    )
    report = tmp_path / "reports" / "policy.xml"  # its folder is made
    r = _gate("policy", "test", "--config", EXAMPLE_POLICY, cases, "--junit", report, cwd=tmp_path)
    assert r.returncode == 1
    root = ElementTree.parse(report).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures")) == ("2", "1")
    testcases = root.findall("./testsuite/testcase")
    assert [t.get("name") for t in testcases] == ["ls runs", "rm runs"]
    assert testcases[0].find("failure") is None
    failure = testcases[1].find("failure")
    assert failure is not None
    assert failure.get("message") == "decision: expected allow, got ask"
    assert "rule: " not in (failure.text or "")  # no rule was expected, so none was checked
    assert "case 2" in (failure.text or "")


def test_an_invalid_cases_file_exits_2_naming_file_and_case(tmp_path: Path) -> None:
    path = tmp_path / "cases.toml"
    bad: list[tuple[str, str]] = [
        ('[[cases]]\nname = "x"\ntool = \n', "not valid TOML"),
        ('[[cases]]\nname = "x"\ntool = \n', "line 3"),
        ("", "no [[cases]]"),
        ('[policy]\nfile = "gate.toml"\n', "unknown key(s) ['policy']"),
        (
            '[[cases]]\nname = "a"\ntool = "Bash"\nexpect = { decision = "allow" }\n'
            '[[cases]]\nname = "typo"\ntool = "Bash"\nexpect = { decison = "allow" }\n',
            "case 2 'typo': expect.decision: Field required",
        ),
        (
            '[[cases]]\nname = "x"\ntool = "Bash"\nexpect = { decision = "maybe" }\n',
            "case 1 'x': expect.decision: Input should be 'allow', 'deny' or 'ask'",
        ),
        (
            '[[cases]]\nname = "x"\ntool = "Bash"\nagnet = "a"\nexpect = { decision = "allow" }\n',
            "case 1 'x': agnet: Extra inputs are not permitted",
        ),
        (
            f'[[cases]]\nname = "long"\ntool = "{"t" * 201}"\nexpect = {{ decision = "allow" }}\n',
            "case 1 'long': not a call gate accepts: tool: String should have at most 200",
        ),
        (
            '[[cases]]\nname = "x"\ntool = "Bash"\nargs = "ls"\nexpect = { decision = "allow" }\n',
            "case 1 'x': not a call gate accepts: args: Input should be a valid dictionary",
        ),
        (
            '[[cases]]\nname = "x"\ntool = "a"\nexpect = { decision = "allow" }\n'
            '[[cases]]\nname = "x"\ntool = "b"\nexpect = { decision = "allow" }\n',
            "case 2: a second case is named 'x'",
        ),
    ]
    for text, words in bad:
        path.write_text(text)
        r = _gate("policy", "test", "--config", EXAMPLE_POLICY, path, cwd=tmp_path)
        assert r.returncode == 2, (text, r.stdout, r.stderr)
        assert r.stderr.startswith(f"gate: invalid cases file: {path}"), r.stderr
        assert words in r.stderr, (words, r.stderr)
    r = _gate("policy", "test", "--config", EXAMPLE_POLICY, tmp_path / "missing.toml", cwd=tmp_path)
    assert r.returncode == 2
    assert "missing.toml: file not found" in r.stderr


def test_an_invalid_policy_exits_2(tmp_path: Path) -> None:
    broken = _policy(
        tmp_path / "gate.toml",
        {"name": "typo", "tools": ["Bash"], "when": "args.command.includes('rm')"},
    )
    r = _gate("policy", "test", "--config", broken, EXAMPLE_CASES, cwd=tmp_path)
    assert r.returncode == 2
    assert f"gate: policy error: {broken}: rules.typo.when" in r.stderr
    r = _gate("policy", "test", "--config", tmp_path / "nope.toml", EXAMPLE_CASES, cwd=tmp_path)
    assert r.returncode == 2
    assert "gate: configuration error:" in r.stderr
    assert "nope.toml: file not found" in r.stderr
    r = _gate("policy", "lint", "--config", broken, cwd=tmp_path)
    assert r.returncode == 2
    assert "rules.typo.when" in r.stderr
    # no --config, no $GATE_CONFIG and no ./gate.toml: nothing to test against
    empty = tmp_path / "empty"
    empty.mkdir()
    for command in (["test", str(EXAMPLE_CASES)], ["lint"]):
        r = _gate("policy", *command, cwd=empty)
        assert r.returncode == 2
        assert r.stderr == "gate: no policy file: pass --config gate.toml (or set $GATE_CONFIG)\n"


# -- the CLI and the server agree -----------------------------------------------------------


def test_policy_test_decides_as_the_running_server(
    make_gate: GateFactory, db_url: str, tmp_path: Path
) -> None:
    """Each call is sent to POST /v1/gate on a real server (on each database); its answers
    become the expectations of a cases file, which `gate policy test` must pass against the
    same gate.toml."""
    data = cfg.settings_data(db_url)
    data["rules"] = [
        *data["rules"],
        {
            "name": "vendor-grants",
            "tools": ["vendor_*"],
            "approvers": ["group:finance", "carol"],
            "grant_scopes": ["session", "agent"],
        },
        {"name": "deny-shell", "tools": ["shell"], "action": "deny"},
    ]
    config = tmp_path / "gate.toml"
    config.write_text(cfg.to_toml(data))
    calls: list[dict[str, Any]] = [
        {"tool_name": "read_file", "tool_args": {"path": "a"}},
        {"tool_name": "db_write", "tool_args": {"env": "prod"}},
        {"tool_name": "db_write", "tool_args": {"env": "dev"}},
        {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}, "agent_id": "a1"},
        {"tool_name": "pay_vendor", "tool_args": {"amount": 10}},
        {"tool_name": "pay_vendor", "tool_args": {}},  # `when` fails: ask, fail closed
        {"tool_name": "wire_money", "tool_args": {"to": "x"}, "user_id": "u1"},
        {"tool_name": "vendor_add", "tool_args": {"name": "acme"}, "context": {"cwd": "/x"}},
        {"tool_name": "SHELL", "tool_args": {}},  # a variant meets the deny rule
        {"tool_name": "READ_file", "tool_args": {}},  # a variant never meets an allow rule
        {"tool_name": "other", "tool_args": {}, "metadata": {"requires_confirmation": True}},
    ]
    gate = make_gate(Settings(**data))
    cases = []
    for number, call in enumerate(calls):
        got = gate.submit(**call)
        request = got["request"] or {}
        expect: dict[str, Any] = {"decision": got["decision"], "rule": got["rule"] or ""}
        if got["decision"] == "ask":
            expect["approvers"] = request["approvers"]
            expect["grant_scopes"] = request["options"]["grant_scopes"]
        keys = {"tool_name": "tool", "tool_args": "args", "agent_id": "agent", "user_id": "user"}
        case = {keys.get(k, k): v for k, v in call.items()}
        cases.append({"name": f"call {number}", **case, "expect": expect})
    # the calls cover every answer, and asks with approvers and grant scopes
    answers = {c["expect"]["decision"] for c in cases}
    assert answers == {"allow", "deny", "ask"}
    vendor = cases[7]["expect"]
    assert sorted(vendor["approvers"]) == ["alice", "bob", "carol"]
    assert sorted(vendor["grant_scopes"]) == ["agent", "session"]
    assert cases[8]["expect"]["decision"] == "deny"
    assert cases[9]["expect"] == {"decision": "allow", "rule": ""}
    assert cases[10]["expect"]["rule"] == "requires_confirmation"
    r = _gate(
        "policy", "test", "--config", config, _cases(tmp_path / "cases.toml", *cases), cwd=tmp_path
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(calls)} case(s), {len(calls)} passed, 0 failed" in r.stdout


# -- gate policy lint -----------------------------------------------------------------------


def test_lint_finds_nothing_in_the_example(tmp_path: Path) -> None:
    lint = ("policy", "lint", "--config", EXAMPLE_POLICY, "--cases", EXAMPLE_CASES)
    r = _gate_process(*lint, cwd=tmp_path)  # the real command, once for lint
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == f"{EXAMPLE_POLICY}: 0 finding(s) in 4 rule(s), cases {EXAMPLE_CASES}"


def test_lint_names_rules_that_can_never_match(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path / "gate.toml",
        {"name": "github-all", "tools": ["mcp__github__*"]},
        {"name": "github-merge", "tools": ["mcp__github__merge_*"], "action": "deny"},
        {"name": "no-bash", "tools": ["bash"], "action": "deny"},
        # the deny rule for `bash` catches `Bash` too (a case variant): this never matches
        {"name": "bash-rm", "tools": ["Bash"], "when": "args.command.contains('rm')"},
        {"name": "reads", "tools": ["Read"], "action": "allow"},
        # the allow rule takes `Read` as written, but `read` and `ＲＥＡＤ` still come here
        {"name": "read-variants", "tools": ["Read"], "action": "deny"},
        {"name": "conditional", "tools": ["Write"], "when": "args.path == 'x'"},
        {"name": "writes", "tools": ["Write", "Edit"]},  # a `when` shadows nothing
        {"name": "edits", "tools": ["Edit", "NotebookEdit"], "action": "deny"},
    )
    r = _gate("policy", "lint", "--config", policy, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines == [
        f"{policy}: rule 'github-merge' can never match: 'mcp__github__merge_*': rule "
        "'github-all' (no `when`) comes first and catches every tool name it matches",
        f"{policy}: rule 'bash-rm' can never match: 'Bash': rule 'no-bash' (no `when`) comes "
        "first and catches every name it matches as a case or look-alike variant (deny rules "
        "catch variants: gate/policy/toolnames.py)",
        f"{policy}: rule 'edits': tool pattern 'Edit' is never reached: rule 'writes' (no "
        "`when`) comes first and catches every tool name it matches",
        f"{policy}: 3 finding(s) in 9 rule(s)",
    ]


def test_lint_with_cases_names_rules_no_case_exercised(tmp_path: Path) -> None:
    cases = _cases(
        tmp_path / "cases.toml",
        {
            "name": "rm asks",
            "tool": "Bash",
            "args": {"command": "rm x"},
            "expect": {"decision": "ask"},
        },
        {
            "name": "docs",
            "tool": "WebFetch",
            "args": {"url": "https://docs.x"},
            "expect": {"decision": "allow"},
        },
    )
    r = _gate("policy", "lint", "--config", EXAMPLE_POLICY, "--cases", cases, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        f"{EXAMPLE_POLICY}: rule 'secret-files' is not exercised: no case is decided by it",
        f"{EXAMPLE_POLICY}: rule 'github-writes' is not exercised: no case is decided by it",
        f"{EXAMPLE_POLICY}: rule 'fetch-outside-docs' is not exercised: no case is decided by it",
        f"{EXAMPLE_POLICY}: 3 finding(s) in 4 rule(s), cases {cases}",
    ]
    (tmp_path / "bad.toml").write_text("[[cases]]\n")
    r = _gate(
        "policy", "lint", "--config", EXAMPLE_POLICY, "--cases", tmp_path / "bad.toml", cwd=tmp_path
    )
    assert r.returncode == 2
    assert "gate: invalid cases file:" in r.stderr


def test_glob_cover_agrees_with_fnmatch() -> None:
    """`covers` against every name up to four characters: it calls a pair covered exactly
    when no name the inner glob matches is missed by the outer one (hand-picked globs, and
    random ones from a fixed seed)."""
    patterns = [
        *["*", "a*", "*b", "a?", "?", "ab", "[ab]*", "[!a]*", "a*b", "*a*", "[a-b]b", "a[", "**"],
        *["[]a]", "[!]]*", "*?*", "?*?", "a*a*a", "[x[]b"],
    ]
    pick = random.Random(31)
    pieces = ["a", "b", "x", "*", "?", "[ab]", "[!b]", "["]
    patterns += ["".join(pick.choices(pieces, k=pick.randint(1, 4))) for _ in range(40)]
    names = ["".join(p) for n in range(5) for p in itertools.product("ab[x]", repeat=n)]
    for outer, inner in itertools.product(patterns, repeat=2):
        inside = [name for name in names if fnmatch.fnmatchcase(name, inner)]
        truth = all(fnmatch.fnmatchcase(name, outer) for name in inside)
        assert globs.covers(outer, inner) == truth, (outer, inner)


def test_the_docs_cases_are_valid(tmp_path: Path) -> None:
    """Every cases file docs/policy-testing.md shows is one `gate policy test` accepts."""
    text = (ROOT / "docs" / "policy-testing.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```toml\n")[1:]]
    assert len(blocks) == 3  # the third: a case that supplies history
    for number, block in enumerate(blocks):
        path = tmp_path / f"docs-{number}.toml"
        path.write_text(block)
        r = _gate("policy", "test", "--config", EXAMPLE_POLICY, path, cwd=tmp_path)
        assert r.returncode in (0, 1), r.stderr  # 2 would be an invalid file
        assert "case(s)" in r.stdout


def test_lint_names_tools_the_installed_hook_never_sends(tmp_path: Path) -> None:
    """A rule naming a tool the agent's gate hook does not send can never fire: lint counts it
    (`gate policy check` only warns)."""
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    hook = {"type": "command", "command": "gate hook claude-code"}
    settings.write_text(
        json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}})
    )
    r = _gate("policy", "lint", "--config", EXAMPLE_POLICY, cwd=tmp_path)
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    # one finding per pattern: Write, Edit, apply_patch, the three GitHub globs, WebFetch
    assert len(lines) == 8
    assert lines[0].startswith(
        f"{EXAMPLE_POLICY}: rule 'secret-files' names 'Write', but the claude-code hook"
    )
    assert "never sends it to gate, so the rule cannot fire there" in lines[0]
    assert [line.split("'")[1] for line in lines[:7]] == [
        *["secret-files"] * 3,
        *["github-writes"] * 3,
        "fetch-outside-docs",
    ]
    assert not any("risky-bash" in line for line in lines)
    assert lines[7] == f"{EXAMPLE_POLICY}: 7 finding(s) in 4 rule(s)"
