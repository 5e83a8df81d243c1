"""`gate policy replay CANDIDATE`: the decision log run through a candidate policy.

Each logged call is decided again by the candidate's rules and compared with the answer it
got. What the report holds, per flip (`allow->ask`, `ask->allow`, `ask->deny`, ...) and the
rule that now decides: how many calls, three examples, and the load (asks per day before and
after). A flip that would allow a call a person rejected (an ask whose request ended
`rejected` by an approver) is **dangerous**; the command exits 1 on any unless told to
accept them.

Replay evaluates conditions on the call's whole arguments and metadata, which the log keeps
for `[decision_log].args_retention` (7 days by default). Older rows hold only the masked
arguments: they are evaluated on those, and a row whose new answer could depend on what
masking hid (a `when` was evaluated, or no rule matched and `metadata` is gone) is marked
**uncertain**. An uncertain flip counts like a certain one, dangerous ones too: replay fails
closed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from gate.policy.rules import FORCED_RULE, CallFacts, Policy
from gate.store.records import DecisionRow, ReplayRow
from gate.text import untrusted

#: examples shown per flip and rule
EXAMPLES = 3
#: characters of an example's masked arguments shown
ARGS_SHOWN = 100


def before_answer(answer: str) -> str:
    """A logged answer as policy gave it: a grant answered an ask, but the rule asked."""
    return "ask" if answer == "granted" else answer


def facts_of(row: DecisionRow) -> tuple[CallFacts, bool]:
    """What the rules see of a logged call, and whether it is the whole call (False: only
    the masked arguments are left, and no metadata)."""
    facts = row.facts
    if isinstance(facts, dict) and isinstance(facts.get("args"), dict):
        metadata = facts.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        return CallFacts(row.tool_name, facts["args"], row.agent_id, row.user_id, metadata), True
    return CallFacts(row.tool_name, row.masked_args, row.agent_id, row.user_id, {}), False


@dataclass(frozen=True)
class Replayed:
    """One logged call: its answer then, the candidate's now."""

    row: ReplayRow
    before: str
    after: str
    #: the candidate's deciding rule (None: no rule matched)
    rule: str | None
    #: evaluated on masked arguments where the answer could depend on what was masked
    uncertain: bool

    @property
    def flip(self) -> str | None:
        """`before->after`, or None when the answer is the same."""
        return None if self.before == self.after else f"{self.before}->{self.after}"

    @property
    def dangerous(self) -> bool:
        """The candidate would allow a call a person rejected."""
        rejected = self.row.status == "rejected" and self.row.decided_by is not None
        return self.before == "ask" and self.after == "allow" and rejected

    def example(self) -> dict[str, Any]:
        """The call as the report shows it (arguments masked)."""
        entry = self.row.entry
        args = untrusted.to_json(entry.masked_args)
        return {
            "at": entry.at.isoformat(),
            "tool_name": entry.tool_name,
            "args": args[:ARGS_SHOWN] + ("…" if len(args) > ARGS_SHOWN else ""),
            "agent_id": entry.agent_id,
            "rule_before": entry.rule,
            "request_id": entry.request_id,
            "outcome": self.row.status,
            "decided_by": self.row.decided_by,
            "uncertain": self.uncertain,
            "dangerous": self.dangerous,
        }


def decide_again(policy: Policy, row: ReplayRow) -> Replayed:
    """Run one logged call through `policy`."""
    facts, whole = facts_of(row.entry)
    decision = policy.evaluate(facts)
    rule = decision.rule.name if decision.rule is not None else None
    consulted = decision.action is None or rule == FORCED_RULE
    consulted = consulted or any(_evaluated_a_condition(step) for step in decision.trail)
    return Replayed(
        row,
        before_answer(row.entry.answer),
        decision.action or "allow",
        rule,
        uncertain=not whole and consulted,
    )


def _evaluated_a_condition(step: str) -> bool:
    """Whether a trail step (`gate.policy.rules.Policy.evaluate`) ran a rule's `when`."""
    return "`when`" in step and "(no `when`)" not in step


@dataclass
class Report:
    """What a replay found."""

    since: datetime
    until: datetime
    candidate_revision: str
    rows: int = 0
    uncertain: int = 0
    revisions: Counter[str] = field(default_factory=Counter)
    #: (flip, rule now deciding) -> the calls
    flips: dict[tuple[str, str | None], list[Replayed]] = field(default_factory=dict)
    asks_before: Counter[date] = field(default_factory=Counter)
    asks_after: Counter[date] = field(default_factory=Counter)

    def add(self, replayed: Replayed) -> None:
        """Count one replayed call."""
        entry = replayed.row.entry
        self.rows += 1
        self.uncertain += replayed.uncertain
        self.revisions[entry.policy_revision] += 1
        day = entry.at.date()
        self.asks_before[day] += replayed.before == "ask"
        self.asks_after[day] += replayed.after == "ask"
        if replayed.flip is not None:
            self.flips.setdefault((replayed.flip, replayed.rule), []).append(replayed)

    @property
    def dangerous(self) -> list[Replayed]:
        """Every flip that would allow a call a person rejected."""
        return [r for calls in self.flips.values() for r in calls if r.dangerous]

    def days(self) -> list[date]:
        """Every day of the replayed span, oldest first."""
        first, last = self.since.date(), self.until.date()
        return [first + timedelta(days=n) for n in range((last - first).days + 1)]

    def per_day(self, asks: Counter[date]) -> float:
        """Mean asks per day over the span."""
        return round(sum(asks.values()) / max(1, len(self.days())), 1)

    def to_json(self) -> dict[str, Any]:
        """The report for scripts (`--json`)."""
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "candidate_revision": self.candidate_revision,
            "revisions_replayed": dict(self.revisions),
            "rows": self.rows,
            "uncertain": self.uncertain,
            "dangerous": len(self.dangerous),
            "flips": [
                {
                    "flip": flip,
                    "rule": rule,
                    "count": len(calls),
                    "dangerous": sum(c.dangerous for c in calls),
                    "uncertain": sum(c.uncertain for c in calls),
                    "examples": [c.example() for c in _examples(calls)],
                }
                for (flip, rule), calls in self._sorted_flips()
            ],
            "load": {
                "asks_per_day_before": self.per_day(self.asks_before),
                "asks_per_day_after": self.per_day(self.asks_after),
                "days": [
                    {
                        "day": d.isoformat(),
                        "before": self.asks_before[d],
                        "after": self.asks_after[d],
                    }
                    for d in self.days()
                ],
            },
        }

    def _sorted_flips(self) -> list[tuple[tuple[str, str | None], list[Replayed]]]:
        return sorted(self.flips.items(), key=lambda item: (-len(item[1]), item[0][0]))

    def lines(self) -> list[str]:
        """The report for people."""
        revisions = ", ".join(sorted(self.revisions)) or "none"
        out = [
            f"replayed {self.rows} decision(s) from {self.since:%Y-%m-%d %H:%M} to "
            f"{self.until:%Y-%m-%d %H:%M} UTC (logged under revision(s) {revisions}) through "
            f"candidate revision {self.candidate_revision}",
        ]
        if self.uncertain:
            out.append(
                f"{self.uncertain} of them uncertain: their whole arguments were past "
                "args_retention, and the masked ones may decide differently"
            )
        out.append("")
        if not self.flips:
            out.append("no flips: the candidate answers every logged call as it was answered")
        for (flip, rule), calls in self._sorted_flips():
            out.extend(_flip_lines(flip, rule, calls))
        out += ["", "load: asks per day", f"  {'day':<12}{'before':>8}{'after':>8}"]
        for day in self.days():
            out.append(
                f"  {day.isoformat():<12}{self.asks_before[day]:>8}{self.asks_after[day]:>8}"
            )
        before, after = self.per_day(self.asks_before), self.per_day(self.asks_after)
        out.append(f"  {'mean':<12}{before:>8}{after:>8}")
        return out


def _examples(calls: list[Replayed]) -> list[Replayed]:
    """Up to `EXAMPLES` calls, dangerous ones first, then the newest."""
    ranked = sorted(calls, key=lambda c: (not c.dangerous, -(c.row.entry.id or 0)))
    return ranked[:EXAMPLES]


def _flip_lines(flip: str, rule: str | None, calls: list[Replayed]) -> list[str]:
    danger = sum(c.dangerous for c in calls)
    unsure = sum(c.uncertain for c in calls)
    head = f"{flip:<12} rule {rule or '(no rule)'}: {len(calls)} call(s)"
    head += f", {unsure} uncertain" if unsure else ""
    head += f"  DANGEROUS: {danger} a person rejected" if danger else ""
    out = [head]
    for call in _examples(calls):
        shown = call.example()
        said = f"    {shown['at'][:19]}  {_inert(shown['tool_name'])} {_inert(shown['args'])}"
        said += f"  agent {_inert(shown['agent_id'] or '-')}"
        if shown["request_id"]:
            said += f"  request {shown['request_id']} {shown['outcome'] or ''}"
            said += f" by {_inert(shown['decided_by'])}" if shown["decided_by"] else ""
        said += "  (uncertain)" if call.uncertain else ""
        said += "  DANGEROUS" if call.dangerous else ""
        out.append(said)
    return out


def _inert(text: str) -> str:
    """Logged text for the terminal: secrets masked, invisible characters removed, look-alike
    letters escaped, on one line."""
    return untrusted.escape_lookalikes(untrusted.clean(text)).replace("\n", " ⏎ ")


def replay(
    policy: Policy,
    rows: Iterable[ReplayRow],
    *,
    since: datetime,
    until: datetime,
    candidate_revision: str,
) -> Report:
    """Decide every row again under `policy`."""
    report = Report(since=since, until=until, candidate_revision=candidate_revision)
    for row in rows:
        report.add(decide_again(policy, row))
    return report


# -- the command -------------------------------------------------------------------------------

#: exit codes: a dangerous flip (not accepted); invalid input (a file, --since, the database)
DANGEROUS, INVALID = 1, 2


def run(
    config: str | None,
    candidate: str,
    since_text: str,
    *,
    as_json: bool,
    accept_dangerous: bool,
    say: Any,
) -> int:
    """`gate policy replay`: load, read the log read-only, replay, report; the exit code."""
    from gate.base.errors import ConfigError
    from gate.base.statuses import utcnow

    try:
        live, policy = _load(config, candidate)
        since = parse_since(since_text, utcnow())
    except ConfigError as exc:
        say(f"gate: {exc}", err=True)
        return INVALID
    until = utcnow()
    try:
        report = _replay_database(live.server.database_url, policy, since, until)
    except ConfigError as exc:
        say(f"gate: {exc}", err=True)
        return INVALID
    if as_json:
        say(json.dumps(report.to_json(), indent=2))
    else:
        for line in report.lines():
            say(line)
    dangerous = report.dangerous
    if dangerous and not accept_dangerous:
        say(
            f"gate: {len(dangerous)} dangerous flip(s): the candidate would allow calls a "
            "person rejected (marked DANGEROUS above); --accept-dangerous to accept them",
            err=True,
        )
        return DANGEROUS
    return 0


def parse_since(text: str, now: datetime) -> datetime:
    """`--since`: a duration back from `now` (7d, 12h) or a UTC time (2026-11-20T00:00)."""
    from datetime import UTC

    from gate.base.errors import ConfigError
    from gate.config.settings import parse_duration

    try:
        return now - parse_duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--since {text[:40]!r} is neither a duration (7d, 12h) nor a time (2026-11-20T00:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _load(config: str | None, candidate: str) -> tuple[Any, Policy]:
    """The live settings (for the database) and the candidate's compiled policy. A candidate
    without `[[approvers]]` (a file of `[[rules]]` only) borrows every other table from the
    live file."""
    import tomllib
    from pathlib import Path

    from gate.base.errors import ConfigError
    from gate.config.settings import load_settings, resolve_config_path

    live = load_settings(config)
    if live.source in (None, "defaults"):
        raise ConfigError("no gate.toml: pass --config (its database holds the decision log)")
    borrowed: dict[str, Any] = {}
    try:
        drafted = tomllib.loads(Path(candidate).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        drafted = {"approvers": None}  # load_settings below names what is wrong with it
    if "approvers" not in drafted:
        live_path = resolve_config_path(config)
        assert live_path is not None
        whole = tomllib.loads(live_path.read_text(encoding="utf-8"))
        borrowed = {k: v for k, v in whole.items() if k not in drafted and k != "rules"}
    settings = load_settings(candidate, **borrowed)
    return live, Policy(settings)


def _replay_database(url: str, policy: Policy, since: datetime, until: datetime) -> Report:
    """Read the log at `url` read-only and replay it."""
    import sqlalchemy as sa

    from gate.base.errors import ConfigError
    from gate.store import decision_log
    from gate.store.db import existing_schema, read_only_engine

    existing_schema(url)
    engine = read_only_engine(url)
    try:
        with engine.connect() as conn:
            rows = decision_log.since(conn, since)
            return replay(
                policy, rows, since=since, until=until, candidate_revision=policy.revision
            )
    except (sa.exc.OperationalError, sa.exc.ProgrammingError) as exc:
        reason = str(exc.orig or exc).strip().splitlines()[0][:200]
        raise ConfigError(
            f"cannot read the decision log ({reason}); `gate db upgrade` adds it"
        ) from None
    finally:
        engine.dispose()
