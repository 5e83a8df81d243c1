"""Approval fatigue, counted: what the Stats page draws and /metrics exports.

Pure aggregation over the store's history rows (`gate.store.history`) and the current
suggestions (`gate.insights.suggest`): asks per day by rule, time to decision per day and per
approver, glance approvals, asks by weekday and hour, expiries by rule, and the share of
each rule's asks the suggestions would remove. Days and hours are UTC.

"Shown" is the best gate records: the first card post sent on the channel the vote came
from, else the request's creation (the console lists a request the moment it is made;
gate does not record page views). A glance is an approval within `[stats].glance` of that.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from gate.config.settings import Settings
from gate.insights.suggest import Suggestions, from_history
from gate.store import history
from gate.store.db import Database
from gate.store.records import AskRow, VoteTiming

#: rules drawn as their own colour in the stacked chart; the rest are summed as "other"
STACKED_RULES = 5
OTHER = "other"
NO_RULE = "(no rule)"
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class Timing:
    """Median and 90th percentile of some waits, in seconds, and how many there were."""

    count: int
    p50: float | None
    p90: float | None


@dataclass(frozen=True)
class RuleShare:
    """Part of a rule's asks: expired ones, or the ones the suggestions would remove."""

    rule: str
    part: int
    asks: int

    @property
    def share(self) -> float:
        """`part` over `asks` (0 when there were none)."""
        return self.part / self.asks if self.asks else 0.0


@dataclass
class Fatigue:
    """Everything the Stats page's fatigue section draws, over `days` days to `now`."""

    days: int
    glance_seconds: float
    #: the busiest rules first, then OTHER when there are more than STACKED_RULES
    stacked_rules: list[str] = field(default_factory=list)
    asks_by_day: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    asks_by_rule: dict[str, int] = field(default_factory=dict)
    decision_by_day: list[tuple[str, Timing]] = field(default_factory=list)
    decision_by_approver: list[tuple[str, Timing]] = field(default_factory=list)
    #: approver -> (glance approvals, approvals)
    glances: list[tuple[str, int, int]] = field(default_factory=list)
    #: asks per [weekday][hour]
    heat: list[list[int]] = field(default_factory=lambda: [[0] * 24 for _ in WEEKDAYS])
    expiries: list[RuleShare] = field(default_factory=list)
    lost: list[RuleShare] = field(default_factory=list)
    suggestions: Suggestions | None = None


def percentile(values: list[float], p: float) -> float | None:
    """The nearest-rank `p` percentile (0 < p <= 1) of `values`, None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def timing(values: list[float]) -> Timing:
    """p50 and p90 of `values`."""
    return Timing(len(values), percentile(values, 0.5), percentile(values, 0.9))


def measure(db: Database, settings: Settings, *, now: datetime, days: int) -> Fatigue:
    """Read the history of the last `days` days (today included) and count it."""
    start = datetime.combine((now - timedelta(days=days - 1)).date(), time(), UTC)
    asks = history.asks_since(db, start)
    votes = history.vote_timings(db, start)
    found = from_history(
        db,
        now=now,
        window=now - start,
        min_approvals=settings.stats.suggest_min_approvals,
    )
    return count(
        asks,
        votes,
        found,
        start=start.date(),
        days=days,
        glance=settings.stats.glance.total_seconds(),
    )


def count(
    asks: list[AskRow],
    votes: list[VoteTiming],
    found: Suggestions | None,
    *,
    start: date,
    days: int,
    glance: float,
) -> Fatigue:
    """The figures from rows already read (pure: tests and the metrics share it)."""
    result = Fatigue(days=days, glance_seconds=glance, suggestions=found)
    by_rule = Counter(a.rule or NO_RULE for a in asks)
    result.asks_by_rule = dict(by_rule.most_common())
    _asks_by_day(result, asks, start, days)
    _decision_times(result, asks, start, days)
    _by_approver(result, votes, glance)
    for ask in asks:
        result.heat[ask.created_at.weekday()][ask.created_at.hour] += 1
    expired = Counter(a.rule or NO_RULE for a in asks if a.status == "expired")
    result.expiries = [RuleShare(r, expired[r], n) for r, n in by_rule.most_common()]
    lost = found.lost_by_rule() if found else {}
    result.lost = [RuleShare(r, min(lost.get(r, 0), n), n) for r, n in by_rule.most_common()]
    return result


def _asks_by_day(result: Fatigue, asks: list[AskRow], start: date, days: int) -> None:
    ranked = list(result.asks_by_rule)
    # one "other" of a single rule would hide its name for nothing
    shown = ranked if len(ranked) <= STACKED_RULES + 1 else ranked[:STACKED_RULES]
    result.stacked_rules = shown + ([OTHER] if len(ranked) > len(shown) else [])
    per_day: dict[date, Counter[str]] = defaultdict(Counter)
    for ask in asks:
        rule = ask.rule or NO_RULE
        per_day[ask.created_at.date()][rule if rule in shown else OTHER] += 1
    for offset in range(days):
        day = start + timedelta(days=offset)
        result.asks_by_day.append((day.strftime("%m-%d"), dict(per_day[day])))


def _decision_times(result: Fatigue, asks: list[AskRow], start: date, days: int) -> None:
    """Request made to decided by a person, per day the request was made."""
    waits: dict[date, list[float]] = defaultdict(list)
    for ask in asks:
        if ask.decided_at and ask.status in history.DECIDED and ask.decided_via != "timeout":
            waits[ask.created_at.date()].append((ask.decided_at - ask.created_at).total_seconds())
    for offset in range(days):
        day = start + timedelta(days=offset)
        result.decision_by_day.append((day.strftime("%m-%d"), timing(waits[day])))


def _by_approver(result: Fatigue, votes: list[VoteTiming], glance: float) -> None:
    """Card shown to vote, per approver; and their approvals within `glance` of it."""
    waits: dict[str, list[float]] = defaultdict(list)
    approvals: Counter[str] = Counter()
    glances: Counter[str] = Counter()
    for vote in votes:
        seconds = max(0.0, (vote.at - vote.shown_at).total_seconds())
        waits[vote.approver].append(seconds)
        if vote.verdict == "approve":
            approvals[vote.approver] += 1
            if seconds < glance:
                glances[vote.approver] += 1
    ranked = sorted(waits, key=lambda a: (-len(waits[a]), a))
    result.decision_by_approver = [(a, timing(waits[a])) for a in ranked]
    result.glances = sorted(
        ((a, glances[a], approvals[a]) for a in approvals),
        key=lambda g: (-g[1] / g[2] if g[2] else 0, -g[2], g[0]),
    )
