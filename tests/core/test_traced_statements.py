"""With tracing on, the hot paths still take the store's driver path (`gate.store.direct`),
and each statement they send is an event on the span of the request that sent it.

Tracing listens through the store's own hook (`direct.listen`), never through SQLAlchemy's
events, and the counts here are the ones `test_statement_counts.py` holds without tracing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gate.base import tracing
from gate.base.statuses import Verdict
from gate.config.features import TelemetrySettings
from gate.decisions import deciding
from gate.decisions.service import GateService
from gate.server import telemetry
from tests.core.conftest import approver, ask
from tests.support.sql_counter import counting, per_database

_CONTROL = ("BEGIN", "PRAGMA", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


@pytest.fixture
def exporter(service: GateService) -> Iterator[InMemorySpanExporter]:
    service.configured_channels = service.settings.channels.configured()  # cards, as counted
    exporter = InMemorySpanExporter()
    started = telemetry.start(TelemetrySettings(), service.db.engine, exporter=exporter)
    assert started is not None
    try:
        yield exporter
    finally:
        started.stop()
    assert tracing.tracer is None


@pytest.fixture
def through_sqlalchemy(service: GateService) -> Iterator[list[str]]:
    """The statements that went through SQLAlchemy's execution path (not the driver path)."""
    seen: list[str] = []

    def on_cursor(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.lstrip().upper().startswith(_CONTROL):
            seen.append(statement)

    sa.event.listen(service.db.engine, "before_cursor_execute", on_cursor)
    yield seen
    sa.event.remove(service.db.engine, "before_cursor_execute", on_cursor)


def test_a_traced_ask_and_decision_take_the_driver_path(
    service: GateService, exporter: InMemorySpanExporter, through_sqlalchemy: list[str]
) -> None:
    with tracing.tracer.start_as_current_span("ask"), counting(service.db.engine) as asked:
        rid = ask(service, tool_name="refund", tool_args={"amount": 1})
    with tracing.tracer.start_as_current_span("decide"), counting(service.db.engine) as decided:
        result = deciding.decide(service, rid, approver(service, "alice"), Verdict.approve)
    assert result.changed
    # the counts test_statement_counts.py holds untraced, and none through SQLAlchemy's path
    assert asked.count == per_database(service.db.engine, sqlite=4, postgres=2), str(asked)
    assert decided.count == per_database(service.db.engine, sqlite=5, postgres=2), str(decided)
    assert through_sqlalchemy == []
    spans = {s.name: s for s in exporter.get_finished_spans()}
    for name, tally in (("ask", asked), ("decide", decided)):
        told = [
            e.attributes["db.query.text"]
            for e in spans[name].events
            if e.name == "db.statement" and e.attributes is not None
        ]
        told = [t for t in told if not str(t).lstrip().upper().startswith(_CONTROL)]
        assert len(told) == tally.count, (told, str(tally))
    assert spans["gate.request"].attributes is not None
    assert spans["gate.request"].attributes["gate.decision"] == "approved"


def test_statement_events_never_carry_the_parameters(
    service: GateService, exporter: InMemorySpanExporter
) -> None:
    secret = "sk-live-do-not-trace-me"
    with tracing.tracer.start_as_current_span("ask"):
        ask(service, tool_name="refund", tool_args={"amount": 1, "note": secret})
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "ask"]
    assert span.events
    assert all(secret not in str(e.attributes) for e in span.events)
