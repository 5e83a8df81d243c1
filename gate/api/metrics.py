"""`GET /metrics` in Prometheus text format.

Two kinds of figures:

* Read from the database at scrape time (one grouped query each), so every replica reports
  the same global numbers and nothing is counted on the hot path: requests by status and
  rule, outbox backlog and dead deliveries. Aggregate them across replicas with `max`, not
  `sum`.
* Approval fatigue (`gate_fatigue_*`, `gate.api.fatigue_metrics`): the Stats page's figures over
  `[stats].window`, counted from the database at most every five minutes per replica.
* Observed by this replica: open long-polls (its notifier), how long its sweeps take, and the
  time to decision of requests it finished. A decision costs one deque append; the row's
  timestamps are read in one batched primary-key query at the next scrape. Sum these.
  `gate_shadow_flips_total` is one too: a counter bumped in memory when a shadow rule would
  have answered a call differently (`gate.policy.shadow`); calls no shadow rule flips cost nothing.

Each app gets its own registry, so several apps in one process (tests) never collide.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Iterable, Iterator

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gate.api.fatigue_metrics import FatigueCollector
from gate.policy.shadow import ShadowOutcome
from gate.server.state import AppState
from gate.store import gauges, webhooks

log = logging.getLogger(__name__)

#: seconds; people answer in seconds to hours, timeouts run up to days
DECISION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600, 7 * 86400)
#: seconds; a sweep is one indexed query plus one short transaction per due request
SWEEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
#: decisions remembered between scrapes; beyond this the oldest are dropped unobserved
MAX_PENDING_OBSERVATIONS = 100_000


class GateMetrics:
    """The registry and instruments of one app."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.registry = CollectorRegistry(auto_describe=True)
        self.time_to_decision = Histogram(
            "gate_time_to_decision_seconds",
            "From request creation to its final status, for requests this replica finished",
            ["status"],
            buckets=DECISION_BUCKETS,
            registry=self.registry,
        )
        self.sweep_duration = Histogram(
            "gate_sweep_duration_seconds",
            "How long one expiry sweep took on this replica",
            buckets=SWEEP_BUCKETS,
            registry=self.registry,
        )
        self.shadow_flips = Counter(
            "gate_shadow_flips",
            "Calls a shadow rule would have answered differently from the live policy, on "
            "this replica, by shadow rule and flip (live->would, e.g. allow->ask)",
            ["rule", "flip"],
            registry=self.registry,
        )
        self.registry.register(_DatabaseCollector(state))
        self.registry.register(FatigueCollector(state))
        self._finished: collections.deque[str] = collections.deque(maxlen=MAX_PENDING_OBSERVATIONS)
        self._lock = threading.Lock()

    def finished(self, request_id: str) -> None:
        """A request this replica just finished (called after commit, from any thread)."""
        self._finished.append(request_id)

    def shadowed(self, found: tuple[ShadowOutcome, ...]) -> None:
        """Count the flips among what shadow rules would have answered one call."""
        for outcome in found:
            if outcome.flipped:
                self.shadow_flips.labels(rule=outcome.rule, flip=outcome.flip).inc()

    def swept(self, seconds: float) -> None:
        """One sweep took `seconds`."""
        self.sweep_duration.observe(seconds)

    def _observe_finished(self) -> None:
        with self._lock:  # two concurrent scrapes must not observe the same ids twice
            ids = []
            while self._finished:
                ids.append(self._finished.popleft())
            for status, created_at, decided_at in gauges.decision_times(self.state.db, ids):
                if decided_at is not None:
                    seconds = max(0.0, (decided_at - created_at).total_seconds())
                    self.time_to_decision.labels(status=status).observe(seconds)

    def render(self) -> bytes:
        """The text exposition (reads the database; call from a worker thread)."""
        self._observe_finished()
        return generate_latest(self.registry)


class _DatabaseCollector(Collector):
    """Figures read at scrape time: from the database, and the notifier's open waiters."""

    def __init__(self, state: AppState) -> None:
        self.state = state

    def describe(self) -> Iterable[Metric]:
        """No up-front description: the registry must not query the database on register."""
        return []

    def collect(self) -> Iterator[Metric]:
        """One grouped query per table."""
        waiters = GaugeMetricFamily(
            "gate_open_waiters", "Long-polls open on this replica right now"
        )
        waiters.add_metric([], self.state.notifier.waiting)
        yield waiters

        requests = GaugeMetricFamily(
            "gate_requests",
            "Requests in the database by status and rule (global; aggregate with max)",
            labels=["status", "rule"],
        )
        outbox = GaugeMetricFamily(
            "gate_outbox_deliveries",
            "Outbox rows by status and channel: pending is the backlog, dead gave up (global)",
            labels=["status", "channel"],
        )
        for status, rule, n in gauges.requests_by_status_and_rule(self.state.db):
            requests.add_metric([status, rule], float(n))
        for status, channel, n in gauges.deliveries_not_sent(self.state.db):
            outbox.add_metric([status, channel], float(n))
        yield requests
        yield outbox
        if self.state.settings.webhooks:
            yield _webhook_backlog(self.state)


def _webhook_backlog(state: AppState) -> Metric:
    """`[[webhooks]]` messages not sent, by status and webhook (alert on dead > 0)."""
    gauge = GaugeMetricFamily(
        "gate_webhook_messages",
        "Webhook messages by status and webhook: pending is the backlog, dead gave up (global)",
        labels=["status", "webhook"],
    )
    for status, hook, n in webhooks.backlog(state.db):
        gauge.add_metric([status, hook], float(n))
    return gauge


router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus metrics (text exposition format)."""
    gate_metrics: GateMetrics = request.app.state.metrics
    body = await anyio.to_thread.run_sync(gate_metrics.render)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def install(app: FastAPI, state: AppState) -> GateMetrics:
    """Mount `/metrics` and connect the replica's hooks (decisions finished, sweeps)."""
    gate_metrics = GateMetrics(state)
    app.state.metrics = gate_metrics
    state.service.on_final = gate_metrics.finished
    state.service.on_shadow = gate_metrics.shadowed
    state.jobs.on_sweep = gate_metrics.swept
    app.include_router(router)
    return gate_metrics
