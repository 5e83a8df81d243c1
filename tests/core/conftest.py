"""Fixtures for the core tests: a real database, policy and service on a clock the test sets."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from gate.base.notify import Notifier
from gate.base.statuses import Verdict, utcnow
from gate.config.settings import Settings
from gate.decisions import deciding
from gate.decisions.acting import Actor
from gate.decisions.service import GateService
from gate.identity.auth import Principal
from gate.inputs.bodies import GateCall
from gate.policy.rules import Policy
from gate.store.db import Database, upgrade
from tests.support import config as cfg

AGENT = Principal("billing-agent", "agent")
OTHER_AGENT = Principal("other-agent", "agent")

RULES: list[dict[str, Any]] = [
    {
        "name": "refunds",
        "tools": ["refund"],
        "timeout": "10m",
        "approvers": ["group:finance"],
        "grant_scopes": ["agent"],
        "reject_reasons": ["wrong customer"],
        "editable": ["amount"],
    },
    {"name": "wires", "tools": ["wire"], "approvers": ["group:finance"], "approvals_required": 2},
]


class Clock:
    """A clock the test sets; every use case reads it."""

    def __init__(self) -> None:
        self.now = utcnow().replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(db_url: str, clock: Clock) -> Iterator[GateService]:
    data = cfg.settings_data(db_url)
    svc = service_of(data, clock)
    yield svc
    svc.db.dispose()


def service_of(data: dict[str, Any], clock: Clock) -> GateService:
    """A service on `data` (a gate.toml as a dict) plus the core tests' rules, migrated."""
    data["rules"] = RULES + data["rules"]
    settings = Settings(**data)
    upgrade(settings.server.database_url)
    db = Database(settings.server.database_url)
    return GateService(
        settings=settings, db=db, policy=Policy(settings), notifier=Notifier(), clock=clock
    )


def approver(service: GateService, name: str) -> Actor:
    found = service.settings.approver(name)
    assert found is not None
    return Actor.of_approver(found, "api")


def granted_refund(service: GateService, agent_id: str = "bot") -> str:
    """A refund `agent_id` asked for, approved by alice with a 30-minute agent-scope grant."""
    request_id = ask(service, tool_name="refund", tool_args={"amount": 1}, agent_id=agent_id)
    result = deciding.decide(
        service, request_id, approver(service, "alice"), Verdict.approve, grant=("agent", "30m")
    )
    assert result.changed
    return request_id


def ask(service: GateService, principal: Principal = AGENT, **call: Any) -> str:
    submitted = service.submit(GateCall(**call), principal)
    assert submitted.view is not None, submitted.decision
    return submitted.view.id
