"""`gate policy test`, `lint`, `replay` and `suggest`: the subcommands and their exit codes.

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
    _config_arg(test)
    test.add_argument("cases", help="TOML file of [[cases]]: a call and what must happen")
    test.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report to FILE")
    test.set_defaults(handler=_test)
    lint = policy.add_parser(
        "lint",
        help="find rules that can never match and tool patterns never reached; exit 1 if any",
    )
    _config_arg(lint)
    lint.add_argument(
        "--cases", metavar="FILE", help="a cases file: also name the rules no case exercises"
    )
    lint.set_defaults(handler=_lint)
    replay = policy.add_parser(
        "replay",
        help="run the decision log through a candidate policy: flips, examples, asks per day; "
        "exit 1 on a dangerous flip, 2 on invalid input",
    )
    _config_arg(replay)
    replay.add_argument(
        "candidate",
        help="the candidate gate.toml (a copy with its rules changed; a file of [[rules]] "
        "only takes everything else from --config)",
    )
    replay.add_argument(
        "--since", default="7d", help="how far back: a duration (7d, 12h) or a UTC time"
    )
    replay.add_argument("--json", action="store_true", help="print JSON for scripts")
    replay.add_argument(
        "--accept-dangerous",
        action="store_true",
        help="exit 0 even when the candidate would allow calls a person rejected",
    )
    replay.set_defaults(handler=_replay)
    suggest = policy.add_parser(
        "suggest",
        help="propose allow/deny rules from what people decided (read-only; nothing is applied)",
    )
    _config_arg(suggest)
    suggest.add_argument(
        "--since",
        default=None,
        help="how far back to look, e.g. 7d or 12h (default [stats].window, 30d)",
    )
    suggest.add_argument(
        "--min-approvals",
        type=int,
        default=None,
        metavar="N",
        help="approvals (by 2+ people) a call needs (default [stats].suggest_min_approvals, 5)",
    )
    suggest.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    suggest.set_defaults(handler=_suggest)


def _config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", "-c", help="path to gate.toml (default: $GATE_CONFIG or ./gate.toml)"
    )


def _say(line: str, *, err: bool = False) -> None:
    print(line, file=sys.stderr if err else sys.stdout)


def _policy(ns: argparse.Namespace) -> tuple[Policy, str] | None:
    """The policy the server would load from --config (None: it is invalid, and said so)."""
    from gate.base.errors import ConfigError
    from gate.config.settings import load_settings
    from gate.policy.rules import Policy, compile_rules

    try:
        settings = load_settings(ns.config)
    except ConfigError as exc:
        _say(f"gate: configuration error: {exc}", err=True)
        return None
    if settings.source is None or settings.source == "defaults":
        # no file at all: the cases would run against an empty policy and fail for no reason
        _say("gate: no policy file: pass --config gate.toml (or set $GATE_CONFIG)", err=True)
        return None
    _, problems, warnings = compile_rules(settings)
    for warning in warnings:
        _say(f"gate: warning: {warning}", err=True)
    for problem in problems:  # every broken rule named, not only the first
        _say(f"gate: policy error: {problem}", err=True)
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
        _say(f"gate: invalid cases file: {exc}", err=True)
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
        _say(line)
    if ns.junit:
        try:
            policy_cases.write_junit(outcomes, ns.cases, Path(ns.junit))
        except OSError as exc:
            _say(f"gate: cannot write {ns.junit}: {exc.strerror or exc}", err=True)
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
        _say(f"{source}: {finding.message}")
    checked = f"{len(policy.rules)} rule(s)" + (f", cases {ns.cases}" if ns.cases else "")
    _say(f"{source}: {len(findings)} finding(s) in {checked}")
    return 1 if findings else 0


def _replay(ns: argparse.Namespace) -> int:
    from gate.insights import replay as policy_replay

    def say(line: str, *, err: bool = False) -> None:
        _say(line, err=err)

    return policy_replay.run(
        ns.config,
        ns.candidate,
        ns.since,
        as_json=ns.json,
        accept_dangerous=ns.accept_dangerous,
        say=say,
    )


def _suggest(ns: argparse.Namespace) -> int:
    """Read the database the config names (read-only, no server) and print proposals."""
    import json
    from datetime import UTC, datetime

    from sqlalchemy.exc import SQLAlchemyError

    from gate.base.errors import ConfigError
    from gate.config.settings import load_settings, parse_duration
    from gate.insights import suggest, suggest_report
    from gate.store.db import Database, existing_schema

    try:
        settings = load_settings(ns.config)
        window = parse_duration(ns.since) if ns.since else settings.stats.window
        need = (
            settings.stats.suggest_min_approvals if ns.min_approvals is None else ns.min_approvals
        )
        if need < 2:
            raise ValueError("--min-approvals must be 2 or more")
        # checked before it is opened: opening a SQLite file that is not there creates it
        existing_schema(settings.server.database_url)
        db = Database(settings.server.database_url)
    except (ConfigError, ValueError) as exc:
        _say(f"gate: {exc}", err=True)
        return INVALID
    now = datetime.now(UTC)
    try:
        found = suggest.from_history(db, now=now, window=window, min_approvals=need)
    except SQLAlchemyError as exc:
        _say(f"gate: cannot read the database: {getattr(exc, 'orig', None) or exc}", err=True)
        return INVALID
    finally:
        db.dispose()
    if ns.json:
        _say(json.dumps(suggest_report.as_json(found, since=now - window), indent=2))
    else:
        for line in suggest_report.text(found, since=now - window):
            _say(line)
    return 0
