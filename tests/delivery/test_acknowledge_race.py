"""An acknowledgement and an escalation at the same moment, on each database.

Both are compare-and-sets on the request's row (`gate.store.nudges.acknowledge` and
`mark`): whichever commits first, the trail never shows a reminder or an escalation after
the acknowledgement, the chain stays intact, and nothing nudges the request again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from gate.app import create_app
from gate.config.settings import Settings
from gate.decisions import acknowledging, audit
from gate.decisions.acting import Actor
from gate.decisions.outcomes import Acknowledged
from gate.delivery.reminders import remind_and_escalate
from tests.api.conftest import OFFERING_RULES, Clock
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.servers import ThreadServer

#: rounds per database: enough for both orders to turn up, short on two shared cores
ROUNDS = 12


@pytest.fixture
def escalating(db_url: str) -> Iterator[tuple[Gate, Clock]]:
    """A gate whose `escalate_*` rule reminds at 5 min and escalates at 10, on a hand clock;
    its background jobs are left to the test."""
    clock = Clock()
    data = cfg.settings_data(db_url, sweep_interval_seconds=3600, followup_interval_seconds=3600)
    data["rules"] = OFFERING_RULES + data["rules"]
    settings = Settings(**data)
    server = ThreadServer(create_app(settings, clock=clock)).start()
    yield Gate(server, settings), clock
    server.stop()


def test_an_acknowledgement_and_an_escalation_at_once(
    escalating: tuple[Gate, Clock],
) -> None:
    gate, clock = escalating
    service = gate.state.service
    alice = service.settings.approver("alice")
    assert alice is not None
    orders: set[tuple[str, ...]] = set()
    for _ in range(ROUNDS):
        rid = gate.submit(tool_name="escalate_me", tool_args={})["request"]["id"]
        clock.now += timedelta(minutes=11)  # both the reminder and the escalation are due
        result = _race(service, rid, clock.now, Actor.of_approver(alice, "api"))
        now = clock.now
        assert result.refusal is None and isinstance(result.outcome, Acknowledged), result
        assert not result.outcome.already
        kinds = tuple(e.kind for e in audit.trail(service.db, rid))
        acked = kinds.index("acknowledged")
        # nothing nudged anyone after the acknowledgement committed
        assert not {"reminded", "escalated"} & set(kinds[acked:]), kinds
        orders.add(kinds)
        # and nothing will: the next tick, however late, finds nothing due
        assert remind_and_escalate(service, now + timedelta(hours=1)) == (0, 0)
        view = service.view(rid)
        assert view is not None and view.status == "pending"
        assert view.acknowledged_by == "alice"
    assert audit.verify(service.db) == []
    # the acknowledgement came first, last or between the reminder and the escalation:
    # every order seen is one of these
    allowed = {
        ("created", "acknowledged"),
        ("created", "reminded", "acknowledged"),
        ("created", "reminded", "escalated", "acknowledged"),
    }
    assert orders <= allowed, orders


def _race(service: Any, rid: str, now: Any, actor: Actor) -> Any:
    """The reminder job's tick and `actor`'s acknowledgement, released at the same moment;
    the acknowledgement's result."""
    start = threading.Barrier(2)
    got: dict[str, Any] = {}

    def escalate() -> None:
        start.wait()
        got["nudged"] = remind_and_escalate(service, now)

    def acknowledge() -> None:
        start.wait()
        got["ack"] = acknowledging.acknowledge(service, rid, actor)

    threads = [threading.Thread(target=escalate), threading.Thread(target=acknowledge)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert "nudged" in got, "the reminder job failed"
    return got["ack"]
