"""`gate policy test` and `lint`: the subcommands and their exit codes (`replay` and
`suggest`, which read the database, are `gate.insights.commands`).

Exit codes, for CI: 0 all is well; 1 a case failed (test), lint found something, or (replay)
a flip is dangerous; 2 the policy file or the cases file is invalid (the message names the
file and the key or case), or (replay, suggest) the database cannot be read.

Only the standard library is imported here; the work is imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gate.policy.cases import Case
    from gate.policy.rules import Policy

#: the policy or the cases file is invalid (as for a configuration error in `gate serve`)
INVALID = 2


def add_commands(policy: Any) -> None:
    """Add `test` and `lint` to the `gate policy` subparsers."""
    test = policy.add_parser(
        "test",
        help="run a cases file against the policy; exit 1 if a case fails, 2 if a file is invalid",
    )
    config_arg(test)
    test.add_argument("cases", help="TOML file of [[cases]]: a call and what must happen")
    test.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report to FILE")
    test.set_defaults(handler=_test)
    lint = policy.add_parser(
        "lint",
        help="find rules that can never match and tool patterns never reached; exit 1 if any",
    )
    config_arg(lint)
    lint.add_argument(
        "--cases", metavar="FILE", help="a cases file: also name the rules no case exercises"
    )
    lint.set_defaults(handler=_lint)


def config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", "-c", help="path to gate.toml (default: $GATE_CONFIG or ./gate.toml)"
    )


def say_line(line: str, *, err: bool = False) -> None:
    print(line, file=sys.stderr if err else sys.stdout)


def _policy(ns: argparse.Namespace) -> tuple[Policy, str] | None:
    """The policy the server would load from --config (None: it is invalid, and said so)."""
    from gate.base.errors import ConfigError
    from gate.config.settings import load_settings
    from gate.policy.rules import Policy, compile_rules

    try:
        settings = load_settings(ns.config)
    except ConfigError as exc:
        say_line(f"gate: configuration error: {exc}", err=True)
        return None
    if settings.source is None or settings.source == "defaults":
        # no file at all: the cases would run against an empty policy and fail for no reason
        say_line("gate: no policy file: pass --config gate.toml (or set $GATE_CONFIG)", err=True)
        return None
    _, problems, warnings = compile_rules(settings)
    for warning in warnings:
        say_line(f"gate: warning: {warning}", err=True)
    for problem in problems:  # every broken rule named, not only the first
        say_line(f"gate: policy error: {problem}", err=True)
    if problems:
        return None
    return Policy(settings), settings.source


def _load_cases(path: str) -> list[Case] | None:
    """The cases file, or None once its error is said (the command then exits 2)."""
    from gate.base.errors import ConfigError
    from gate.policy import cases as policy_cases

    try:
        return policy_cases.load_cases(Path(path))
    except ConfigError as exc:
        say_line(f"gate: invalid cases file: {exc}", err=True)
        return None


def _test(ns: argparse.Namespace) -> int:
    from gate.policy import cases as policy_cases

    loaded = _policy(ns)
    if loaded is None:
        return INVALID
    policy, _ = loaded
    cases = _load_cases(ns.cases)
    if cases is None:
        return INVALID
    outcomes = policy_cases.run(policy, cases)
    for line in policy_cases.report(outcomes, ns.cases):
        say_line(line)
    if ns.junit:
        try:
            policy_cases.write_junit(outcomes, ns.cases, Path(ns.junit))
        except OSError as exc:
            say_line(f"gate: cannot write {ns.junit}: {exc.strerror or exc}", err=True)
            return INVALID
    return 0 if all(o.passed for o in outcomes) else 1


def _lint(ns: argparse.Namespace) -> int:
    from gate.policy import cases as policy_cases
    from gate.policy import lint as policy_lint
    from gate.policy import matchers as hook_matchers

    loaded = _policy(ns)
    if loaded is None:
        return INVALID
    policy, source = loaded
    exercised = None
    if ns.cases:
        cases = _load_cases(ns.cases)
        if cases is None:
            return INVALID
        outcomes = policy_cases.run(policy, cases)
        exercised = {o.answer.rule for o in outcomes if o.answer.rule is not None}
    hooks = hook_matchers.installed(hook_matchers.hook_files(Path.cwd()))
    findings = policy_lint.lint(policy.rules, exercised, hooks)
    for finding in findings:
        say_line(f"{source}: {finding.message}")
    checked = f"{len(policy.rules)} rule(s)" + (f", cases {ns.cases}" if ns.cases else "")
    say_line(f"{source}: {len(findings)} finding(s) in {checked}")
    return 1 if findings else 0
