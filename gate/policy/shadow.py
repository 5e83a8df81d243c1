"""Shadow rules: a rule tried beside the live policy, whose answer is only recorded.

A `[[rules]]` entry with `mode = "shadow"` is compiled like any other but left out of the
live first-match order. For each call, once the live decision is made, each shadow rule that
sits before the deciding rule in gate.toml (or before the end, when no rule matched) is
tried on its own, as if it alone were switched on: when it matches, its action is what gate
*would have* answered. That would-have answer rides on the decision (`Decision.shadow`, a
tuple of `ShadowOutcome`), is counted in `gate_shadow_flips_total{rule,flip}` when it
differs, and is what the decision log records. It never changes the answer: the call is
answered by the live rules alone.

Shadow mode cannot be left on and forgotten: a shadow rule must say `until` (a date and time
at most `MAX_TRIAL` away when the policy is loaded); once `until` has passed the policy no
longer loads (`gate serve` refuses to start, `gate policy check` fails) until the rule is
removed, made live, or given a new `until`. A server already running when `until` passes
stops trying the rule and says so on every console page and in the log.

A shadow rule placed after the live rule that decided a call cannot change that call (first
match wins), so it is not even tried: a shadow rule costs CPU only for calls it could flip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from gate.base.errors import ConfigError

#: the longest trial a shadow rule may run: long enough for a month of traffic to be seen,
#: short enough that a forgotten one ends itself (the issue asks for "at most 30 days")
MAX_TRIAL = timedelta(days=30)
#: what a call is answered when no rule matches (`Decision.action` is None)
NO_MATCH_ANSWER = "allow"


@dataclass(frozen=True, slots=True)
class ShadowOutcome:
    """What one shadow rule would have answered a call.

    `rule` is the shadow rule's name, `would` its answer ("allow", "ask" or "deny"), `flip`
    the live answer and the would-have one as "live->would" (e.g. "allow->ask"; equal
    answers give "ask->ask", and `flipped` is False).
    """

    rule: str
    would: str
    flip: str

    @property
    def flipped(self) -> bool:
        """True when the shadow rule would have answered differently from the live policy."""
        live, _, would = self.flip.partition("->")
        return live != would

    def as_dict(self) -> dict[str, Any]:
        """The outcome as a JSON-able mapping (what the decision log stores)."""
        return {"rule": self.rule, "would": self.would, "flip": self.flip}


@dataclass(frozen=True, slots=True)
class Placed:
    """A compiled shadow rule and its place: how many live rules come before it."""

    rule: Any  # gate.policy.rules.Rule (not imported: policy imports this module)
    before: int
    until: datetime


def placed(rules: list[Any]) -> tuple[Placed, ...]:
    """The shadow rules among a policy's compiled `rules` (in file order), each placed."""
    return tuple(
        Placed(rule, sum(r.until is None for r in rules[:index]), rule.until)
        for index, rule in enumerate(rules)
        if rule.until is not None
    )


def until_of(entry: Any, *, now: datetime, source: str | None) -> datetime | None:
    """A `RuleSettings`' `until`, normalised and checked against its `mode` (ConfigError)."""
    until = normalised_until(entry.until)
    check_until(name=entry.name, mode=entry.mode, until=until, now=now, source=source)
    return until


def normalised_until(value: datetime | date | None) -> datetime | None:
    """`until` as an aware UTC datetime: a date means its midnight UTC, a time without an
    offset is taken as UTC."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        return datetime.combine(value, time(0, 0), tzinfo=UTC)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def check_until(
    *, name: str, mode: str, until: datetime | None, now: datetime, source: str | None
) -> None:
    """Refuse a rule whose `mode` and `until` cannot keep shadow mode bounded (ConfigError
    naming the rule's `until`, which `config_errors.located` turns into file:line)."""
    key = f"rules.{name}.until"
    if mode != "shadow":
        if until is not None:
            raise ConfigError(
                '`until` is for shadow rules only (mode = "shadow"); a live rule has no '
                'end date: remove `until`, or add mode = "shadow" to try the rule first',
                source=source,
                key=key,
            )
        return
    if until is None:
        raise ConfigError(
            'a shadow rule (mode = "shadow") needs `until`, the date its trial ends (at most '
            f"{MAX_TRIAL.days} days away, e.g. until = {(now + timedelta(days=14)).date()}), "
            "so shadow mode is never left on and forgotten",
            source=source,
            key=key,
        )
    if until <= now:
        raise ConfigError(
            f"shadow rule {name!r} expired at {shown(until)}: its trial is over, so this policy "
            "is not loaded. Remove the rule, make it live (delete `mode` and `until`), or "
            f"give it a new `until` at most {MAX_TRIAL.days} days away",
            source=source,
            key=key,
        )
    if until - now > MAX_TRIAL:
        raise ConfigError(
            f"`until` {shown(until)} is more than {MAX_TRIAL.days} days away: a shadow rule's "
            f"trial lasts at most {MAX_TRIAL.days} days (until {shown(now + MAX_TRIAL)} "
            "or sooner)",
            source=source,
            key=key,
        )


def shown(moment: datetime) -> str:
    """`until` as people read it: "2026-12-20 00:00 UTC"."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def beside(
    live_action: str | None,
    live_at: int,
    shadows: tuple[Placed, ...],
    now: datetime,
    would: Callable[[Any], str | None],
) -> tuple[ShadowOutcome, ...]:
    """What each shadow rule that could change this call would have answered.

    `live_at` is the live deciding rule's index among the live rules (their count when none
    matched); `would(rule)` tries one rule on the call and gives its action when it matches.
    Rules past their `until` are not tried (the console says they ended).
    """
    answer = live_action or NO_MATCH_ANSWER
    found: list[ShadowOutcome] = []
    for placed in shadows:
        if placed.before > live_at or placed.until <= now:
            continue
        action = would(placed.rule)
        if action is not None:
            found.append(ShadowOutcome(placed.rule.name, action, f"{answer}->{action}"))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Notice:
    """A shadow rule as the console banner and `gate serve` name it."""

    rule: str
    until: datetime
    ended: bool

    @property
    def until_text(self) -> str:
        """The expiry as the banner shows it."""
        return shown(self.until)


def notices(shadows: tuple[Placed, ...], now: datetime) -> list[Notice]:
    """Every shadow rule of a policy, soonest expiry first, each saying whether it ended."""
    ordered = sorted(shadows, key=lambda p: p.until)
    return [Notice(p.rule.name, p.until, p.until <= now) for p in ordered]


def startup_line(found: list[Notice]) -> str | None:
    """What `gate serve` logs at start while shadow rules are on (None: there are none)."""
    if not found:
        return None
    named = ", ".join(f"{n.rule!r} until {n.until_text}" for n in found)
    return (
        f"SHADOW MODE: {len(found)} rule(s) are tried beside the live policy without changing "
        f"any answer: {named}. After that date this policy will not load."
    )


__all__ = [
    "MAX_TRIAL",
    "Notice",
    "Placed",
    "ShadowOutcome",
    "beside",
    "check_until",
    "normalised_until",
    "notices",
    "placed",
    "startup_line",
    "until_of",
]
