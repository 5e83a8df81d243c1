"""`GET /metrics`: Prometheus text with requests, decisions, waiters, outbox and sweeps."""

from __future__ import annotations

import threading

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gate.store.tables import Delivery
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.http import TLS
from tests.support.servers import wait_until


def _scrape(gate: Gate) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = httpx.get(gate.url + "/metrics", timeout=10, verify=TLS)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def test_metrics_report_requests_decisions_waiters_outbox_and_sweeps(gate: Gate) -> None:
    first = gate.submit(tool_name="ask_one", tool_args={})["request"]["id"]
    second = gate.submit(tool_name="ask_two", tool_args={})["request"]["id"]
    with gate.client(cfg.AGENT) as c:
        waiter = threading.Thread(
            target=c.get, args=(f"/v1/requests/{second}/wait",), kwargs={"params": {"timeout": 30}}
        )
        waiter.start()
        wait_until(lambda: _scrape(gate).get(("gate_open_waiters", ())) == 1)
        assert gate.decide(first, cfg.ALICE, "approve").status_code == 200
        assert gate.decide(second, cfg.BOB, "reject", "no").status_code == 200
        waiter.join(timeout=30)

    m = _scrape(gate)
    assert m[("gate_open_waiters", ())] == 0
    assert m[("gate_requests", (("rule", "anyone"), ("status", "approved")))] == 1
    assert m[("gate_requests", (("rule", "anyone"), ("status", "rejected")))] == 1
    hist = ("gate_time_to_decision_seconds_count", (("status", "approved"),))
    assert m[hist] == 1
    assert m[("gate_time_to_decision_seconds_count", (("status", "rejected"),))] == 1
    # Observed once: a second scrape does not count the same decisions again.
    assert _scrape(gate)[hist] == 1
    wait_until(lambda: _scrape(gate).get(("gate_sweep_duration_seconds_count", ()), 0) >= 1)
    # The log channel's cards: the outbox drains, and the backlog gauge goes to zero.
    wait_until(
        lambda: (
            not any(
                v for (name, labels), v in _scrape(gate).items() if name == "gate_outbox_deliveries"
            )
        )
    )


def test_dead_deliveries_show_up(gate_sqlite: Gate) -> None:
    rid = gate_sqlite.submit(tool_name="ask_dead", tool_args={})["request"]["id"]
    # A card owed to a channel that is not configured: the pump gives it up as dead.
    with gate_sqlite.state.db.write() as session:
        session.add(Delivery(request_id=rid, channel="nowhere", target="x", kind="post"))
    key = ("gate_outbox_deliveries", (("channel", "nowhere"), ("status", "dead")))
    wait_until(lambda: _scrape(gate_sqlite).get(key) == 1)
