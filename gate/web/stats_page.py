"""The Stats page's fatigue section: `gate.insights.fatigue`'s figures as charts and tables.

Each chart comes at two widths (`charts.both`) and every figure is also in a table beside
it, so a screen reader, a phone and a copy-paste all get the numbers.
"""

from __future__ import annotations

from typing import Any

from gate.insights.fatigue import WEEKDAYS, Fatigue, RuleShare
from gate.web import charts, fatigue_charts
from gate.web.console import span


def context(f: Fatigue) -> dict[str, Any]:
    """What `stats.html` needs of the fatigue figures: charts, table rows, the legend."""
    return {
        "fatigue": f,
        "rule_keys": list(enumerate(f.stacked_rules)),
        "fatigue_charts": _charts(f),
        **_rows(f),
    }


def _charts(f: Fatigue) -> dict[str, Any]:
    approvers = [(a, t.p50, t.p90) for a, t in f.decision_by_approver]
    days = [(d, t.p50, t.p90) for d, t in f.decision_by_day]
    return {
        "asks": charts.both(
            fatigue_charts.stacked_columns,
            f.asks_by_day,
            f.stacked_rules,
            title="Asks per day by rule",
        ),
        "days": charts.both(
            fatigue_charts.timing_columns, days, title="Time to decision per day, p50 and p90"
        ),
        "approvers": charts.both(
            fatigue_charts.timing_bars,
            approvers,
            title="Card shown to vote per approver, p50 and p90",
        ),
        "glances": charts.both(
            charts.stacked_bars,
            [(a, {"glance": g, "read": n - g}) for a, g, n in f.glances],
            ["glance", "read"],
            title="Approvals at a glance by approver",
        ),
        "heat": charts.both(
            fatigue_charts.heat, f.heat, WEEKDAYS, title="Asks by weekday and hour (UTC)"
        ),
        "expiries": charts.both(
            charts.stacked_bars,
            _split(f.expiries, "expired", "answered"),
            ["expired", "answered"],
            title="Expiries by rule",
        ),
        "lost": charts.both(
            charts.stacked_bars,
            _split(f.lost, "suggested", "kept"),
            ["suggested", "kept"],
            title="Asks the current suggestions would remove, by rule",
        ),
    }


def _rows(f: Fatigue) -> dict[str, Any]:
    return {
        "asks_rows": [
            [day, *(values.get(r, 0) for r in f.stacked_rules), sum(values.values())]
            for day, values in f.asks_by_day
        ],
        "day_rows": [[d, t.count, _wait(t.p50), _wait(t.p90)] for d, t in f.decision_by_day],
        "approver_time_rows": [
            [a, t.count, _wait(t.p50), _wait(t.p90)] for a, t in f.decision_by_approver
        ],
        "glance_rows": [[a, g, n, _percent(g, n)] for a, g, n in f.glances],
        # hours down, weekdays across: eight columns fit a phone, twenty-five would not
        "heat_rows": [
            [f"{hour:02d}:00", *(f.heat[d][hour] for d in range(len(WEEKDAYS)))]
            for hour in range(24)
        ],
        "weekdays": list(WEEKDAYS),
        "expiry_rows": [[s.rule, s.part, s.asks, _percent(s.part, s.asks)] for s in f.expiries],
        "lost_rows": [[s.rule, s.part, s.asks, _percent(s.part, s.asks)] for s in f.lost],
    }


def _split(shares: list[RuleShare], part: str, rest: str) -> list[tuple[str, dict[str, int]]]:
    return [(s.rule, {part: s.part, rest: s.asks - s.part}) for s in shares]


def _wait(seconds: float | None) -> str:
    return span(seconds) if seconds is not None else "—"


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "—"
