"""Approval fatigue counted: the store's history readers on each database, the pure counting,
and the `gate_fatigue_*` metrics a live gate serves (with their cost at 10k requests)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from gate.api.fatigue_metrics import REFRESH_SECONDS, FatigueCollector
from gate.base.statuses import new_id
from gate.config.settings import Settings
from gate.insights.fatigue import count, measure, percentile
from gate.store import history
from gate.store.db import Database
from gate.store.records import AskRow, VoteTiming
from gate.store.tables import ConfirmationRequest, Delivery, Vote
from tests.conftest import Gate, GateFactory
from tests.support.http import TLS
from tests.support.traffic import week_of_traffic

NOW = datetime(2026, 11, 27, 15, 0, tzinfo=UTC)  # a Friday


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """The migrated test database, opened as gate opens it."""
    database = Database(db_url)
    yield database
    database.dispose()


def _ask(rule: str, at: datetime, status: str = "approved", wait: float = 60) -> AskRow:
    decided = at + timedelta(seconds=wait) if status != "pending" else None
    via = "timeout" if status == "expired" else "web"
    return AskRow(
        id=new_id(),
        rule=rule,
        tool_name="t",
        status=status,
        created_at=at,
        decided_at=decided,
        decided_via=via,
    )


def _vote(who: str, shown: datetime, after: float, verdict: str = "approve") -> VoteTiming:
    return VoteTiming(
        request_id="r",
        approver=who,
        verdict=verdict,
        via="slack",
        at=shown + timedelta(seconds=after),
        shown_at=shown,
    )


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([5.0], 0.9) == 5.0
    values = [float(v) for v in range(1, 11)]
    assert (percentile(values, 0.5), percentile(values, 0.9)) == (5.0, 9.0)


def test_counting_by_day_rule_approver_hour_and_glance() -> None:
    day = NOW.replace(hour=9)
    asks = [
        _ask("pay", day, wait=10),
        _ask("pay", day, wait=30),
        _ask("pay", day - timedelta(days=1), status="expired", wait=900),
        _ask("deploy", day + timedelta(hours=2), wait=600),
        _ask("deploy", day, status="pending"),
    ]
    votes = [_vote("bob", day, 2), _vote("bob", day, 3), _vote("bob", day, 40)]
    votes += [_vote("alice", day, 100), _vote("alice", day, 1, verdict="reject")]
    f = count(asks, votes, None, start=NOW.date() - timedelta(days=1), days=2, glance=5)
    assert f.asks_by_rule == {"pay": 3, "deploy": 2}
    assert f.asks_by_day == [("11-26", {"pay": 1}), ("11-27", {"pay": 2, "deploy": 2})]
    # the expired ask is not a person's decision; the pending one is not decided
    (_, yesterday), (_, today) = f.decision_by_day
    assert yesterday.count == 0
    assert (today.count, today.p50, today.p90) == (3, 30, 600)
    assert f.glances == [("bob", 2, 3), ("alice", 0, 1)]  # a quick reject is no glance approval
    assert {a: t.p50 for a, t in f.decision_by_approver} == {"bob": 3, "alice": 1}
    assert f.heat[4][9] == 3 and f.heat[4][11] == 1 and f.heat[3][9] == 1  # Fri 09, 11; Thu 09
    assert [(s.rule, s.part, s.asks) for s in f.expiries] == [("pay", 1, 3), ("deploy", 0, 2)]


def test_many_rules_stack_as_the_busiest_five_and_other() -> None:
    asks = [_ask(f"r{i}", NOW) for i in range(7) for _ in range(10 - i)]
    f = count(asks, [], None, start=NOW.date(), days=1, glance=5)
    assert f.stacked_rules == ["r0", "r1", "r2", "r3", "r4", "other"]
    assert f.asks_by_day[0][1]["other"] == 4 + 5  # r5 and r6


def test_a_card_is_shown_when_it_was_posted_on_the_votes_channel(db: Database) -> None:
    made = NOW - timedelta(hours=1)
    slack_id, web_id = new_id(), new_id()
    rows = [
        {
            "id": rid,
            "tool_name": "t",
            "tool_args": {},
            "context": {},
            "status": "approved",
            "approvers": [],
            "approvals_required": 1,
            "created_at": made,
            "expires_at": made + timedelta(minutes=15),
            "on_timeout": "reject",
            "options": {},
        }
        for rid in (slack_id, web_id)
    ]
    posts = [
        {
            "request_id": slack_id,
            "channel": channel,
            "target": "C1",
            "kind": kind,
            "status": "sent",
            "attempts": 1,
            "next_attempt_at": made,
            "created_at": made,
            "sent_at": made + timedelta(seconds=sent),
        }
        for channel, kind, sent in (
            ("slack", "post", 3),
            ("slack", "update", 1),
            ("teams", "post", 1),
        )
    ]
    votes = [
        {"request_id": rid, "approver": "bob", "verdict": "approve", "via": via, "at": made}
        for rid, via in ((slack_id, "slack"), (web_id, "web"))
    ]
    with db.write_conn() as conn:
        conn.execute(sa.insert(ConfirmationRequest), rows)
        conn.execute(sa.insert(Delivery), posts)
        conn.execute(sa.insert(Vote), votes)
    shown = {v.request_id: v.shown_at for v in history.vote_timings(db, NOW - timedelta(days=1))}
    assert shown[slack_id] == made + timedelta(seconds=3)  # Slack's post, not its update
    assert shown[web_id] == made  # the console lists it the moment it is made
    assert history.vote_timings(db, NOW) == []


def test_a_week_measured_from_the_database(db: Database) -> None:
    made = week_of_traffic(db, now=NOW)
    # seven days of 24 hours back from NOW touch eight calendar days
    f = measure(db, Settings(), now=NOW, days=8)
    assert sum(f.asks_by_rule.values()) == made.requests
    assert f.glances[0][0] == "bob"  # bob approves git pushes at a glance
    assert {s.rule for s in f.lost if s.part} == {"agent-tools", "deploys", "db-writes"}
    assert f.asks_by_day[-1][0] == date(2026, 11, 27).strftime("%m-%d")


# -- /metrics -------------------------------------------------------------------------------


def _scrape(gate: Gate) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], float], float]:
    started = time.perf_counter()
    r = httpx.get(gate.url + "/metrics", timeout=60, verify=TLS)
    took = time.perf_counter() - started
    assert r.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, took


def test_fatigue_metrics_are_served_and_cached_between_countings(gate: Gate) -> None:
    week_of_traffic(gate.state.db, now=datetime.now(UTC))
    m, _ = _scrape(gate)
    assert m[("gate_fatigue_asks", (("rule", "agent-tools"),))] > 0
    assert m[("gate_fatigue_glance_approvals", (("approver", "bob"),))] > 0
    assert m[("gate_fatigue_decision_seconds", (("approver", "bob"), ("quantile", "0.5")))] > 0
    assert 0 < m[("gate_fatigue_suggested_removal_ratio", (("rule", "agent-tools"),))] <= 1
    assert m[("gate_fatigue_suggested_removal_ratio", (("rule", "big-payments"),))] == 0
    assert any(name == "gate_fatigue_asks_by_hour" for name, _ in m)
    # traffic after a counting is not in the figures until the next one: they are cached
    week_of_traffic(gate.state.db, now=datetime.now(UTC), seed=8)
    again, _ = _scrape(gate)
    assert (
        again[("gate_fatigue_asks", (("rule", "agent-tools"),))]
        == m[("gate_fatigue_asks", (("rule", "agent-tools"),))]
    )
    assert again[("gate_fatigue_age_seconds", ())] < REFRESH_SECONDS


def test_a_collector_counts_again_after_the_refresh_interval(db: Database) -> None:
    class _State:
        settings = Settings()
        clock = staticmethod(lambda: NOW)

        def __init__(self, database: Database) -> None:
            self.db = database

    ticks = [0.0]
    collector = FatigueCollector(_State(db), clock=lambda: ticks[0])  # type: ignore[arg-type]

    def asks() -> float:
        family = next(m for m in collector.collect() if m.name == "gate_fatigue_asks")
        return sum(s.value for s in family.samples)

    assert asks() == 0
    week_of_traffic(db, now=NOW)
    ticks[0] = REFRESH_SECONDS - 1
    assert asks() == 0
    ticks[0] = REFRESH_SECONDS
    assert asks() > 0


def test_scrape_time_with_ten_thousand_requests(
    make_gate: GateFactory, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = make_gate(database_url=db_url)
    made = week_of_traffic(gate.state.db, now=datetime.now(UTC), per_day=2000)
    assert made.requests >= 10_000
    _, cold = _scrape(gate)
    _, warm = _scrape(gate)
    with capsys.disabled():
        print(  # noqa: T201
            f"\n/metrics, {gate.settings.server.database_url.split(':')[0]}, {made.requests} "
            f"requests: counting {cold:.2f} s, cached {warm:.3f} s"
        )
    # a measurement first (printed); the bound only catches a return of the 30 s quadratic
    # check, with room for a shared 2-core machine under load (2.4-6.8 s seen)
    assert cold < 25
    assert warm < 1


def test_the_fatigue_figures_take_four_reads_however_much_history(db: Database) -> None:
    from tests.support.sql_counter import counting

    week_of_traffic(db, now=NOW)
    with counting(db.engine) as tally:
        measure(db, Settings(), now=NOW, days=30)
    # asks, votes with their first card post, the window's decided calls, older refusals
    assert tally.count == 4, tally
