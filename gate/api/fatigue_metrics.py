"""The Stats page's fatigue figures on /metrics (`gate_fatigue_*`).

They cover `[stats].window` (30 days by default) and are counted from the database's
history, which is a read of the whole window: so a replica counts them at most once every
`REFRESH_SECONDS` and serves the figures it counted to the scrapes in between (Prometheus
scrapes every 15-60 s; a figure about the last month does not move in five minutes).
`gate_fatigue_age_seconds` says how old the served figures are. Like `gate_requests` they
are global: aggregate across replicas with `max`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gate.insights import fatigue
from gate.server.state import AppState

#: seconds between two countings on one replica: counting 10k asks with their suggestions
#: takes 1-3 s of one core (SQLite, shared 2-core machine), so every 5 minutes is under 1%
REFRESH_SECONDS = 300.0


class FatigueCollector(Collector):
    """`gate_fatigue_*` gauges, counted at most every REFRESH_SECONDS."""

    def __init__(self, state: AppState, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self.clock = clock
        self._lock = threading.Lock()
        self._metrics: list[Metric] = []
        self._counted_at: float | None = None

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: registering must not read the database."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The figures, counted again when the last counting is REFRESH_SECONDS old."""
        with self._lock:  # concurrent scrapes wait for one counting instead of each doing one
            now = self.clock()
            if self._counted_at is None or now - self._counted_at >= REFRESH_SECONDS:
                self._metrics = self._count()
                self._counted_at = now
            age = GaugeMetricFamily(
                "gate_fatigue_age_seconds", "How long ago this replica counted gate_fatigue_*"
            )
            age.add_metric([], now - self._counted_at)
            metrics = [*self._metrics, age]
        yield from metrics

    def _count(self) -> list[Metric]:
        settings = self.state.settings
        days = max(1, math.ceil(settings.stats.window.total_seconds() / 86400))
        f = fatigue.measure(self.state.db, settings, now=self.state.clock(), days=days)
        return figures(f, window_days=days)


def figures(f: fatigue.Fatigue, *, window_days: int) -> list[Metric]:
    """The gauges for one counting (pure, so tests can read them without a registry)."""
    span = f"over the last {window_days} days (global; aggregate with max)"
    asks = _gauge("asks", f"Requests that asked a person, by rule, {span}", ["rule"])
    expired = _gauge(
        "expired", f"Asks that expired with nobody deciding, by rule, {span}", ["rule"]
    )
    removable = _gauge(
        "suggested_removal_ratio",
        f"Share of each rule's asks the current `gate policy suggest` rules would remove, {span}",
        ["rule"],
    )
    for share in f.expiries:
        asks.add_metric([share.rule], float(share.asks))
        expired.add_metric([share.rule], float(share.part))
    for share in f.lost:
        removable.add_metric([share.rule], share.share)
    waits = _gauge(
        "decision_seconds",
        f"Card first shown to the approver's vote, p50 and p90, {span}",
        ["approver", "quantile"],
    )
    for approver, timing in f.decision_by_approver:
        for quantile, value in (("0.5", timing.p50), ("0.9", timing.p90)):
            if value is not None:
                waits.add_metric([approver, quantile], value)
    glances = _gauge(
        "glance_approvals",
        f"Approvals within [stats].glance ({f.glance_seconds:g} s) of the card being shown, {span}",
        ["approver"],
    )
    approvals = _gauge("approvals", f"Approvals by approver, {span}", ["approver"])
    for approver, quick, total in f.glances:
        glances.add_metric([approver], float(quick))
        approvals.add_metric([approver], float(total))
    hours = _gauge(
        "asks_by_hour",
        f"Asks by UTC weekday and hour (busy cells only), {span}",
        ["weekday", "hour"],
    )
    for day, name in enumerate(fatigue.WEEKDAYS):
        for hour, n in enumerate(f.heat[day]):
            if n:
                hours.add_metric([name, f"{hour:02d}"], float(n))
    return [asks, expired, removable, waits, glances, approvals, hours]


def _gauge(name: str, text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"gate_fatigue_{name}", text, labels=labels)
