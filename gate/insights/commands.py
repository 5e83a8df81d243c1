"""`gate policy replay` and `gate policy suggest`: the subcommands that read history.

Exit codes as `gate.policy.commands`: 0 all is well; 1 (replay) a dangerous flip; 2 the
policy is invalid or the database cannot be read. Only the standard library is imported
here; the work is imported when a command runs.
"""

from __future__ import annotations

import argparse

from gate.policy.commands import INVALID, config_arg, say_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def add_commands(policy: Any) -> None:
    """Add `replay` and `suggest` to the `gate policy` subparsers."""
    replay = policy.add_parser(
        "replay",
        help="run the decision log through a candidate policy: flips, examples, asks per day; "
        "exit 1 on a dangerous flip, 2 on invalid input",
    )
    config_arg(replay)
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
    config_arg(suggest)
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


def _replay(ns: argparse.Namespace) -> int:
    from gate.insights import replay as policy_replay

    def say(line: str, *, err: bool = False) -> None:
        say_line(line, err=err)

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
        say_line(f"gate: {exc}", err=True)
        return INVALID
    now = datetime.now(UTC)
    try:
        found = suggest.from_history(db, now=now, window=window, min_approvals=need)
    except SQLAlchemyError as exc:
        say_line(f"gate: cannot read the database: {getattr(exc, 'orig', None) or exc}", err=True)
        return INVALID
    finally:
        db.dispose()
    if ns.json:
        say_line(json.dumps(suggest_report.as_json(found, since=now - window), indent=2))
    else:
        for line in suggest_report.text(found, since=now - window):
            say_line(line)
    return 0
