"""The API over the real app (uvicorn in a thread), with rules that offer more than yes/no."""

from __future__ import annotations

from typing import Any

import pytest

from gate.app import create_app
from gate.base.statuses import utcnow
from gate.config.settings import Settings
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.servers import ThreadServer

OFFERING_RULES: list[dict[str, Any]] = [
    {
        "name": "editable-refunds",
        "tools": ["refund_*"],
        "approvers": ["group:finance"],
        "timeout": "10m",
        "reject_reasons": ["wrong customer", "too expensive"],
    },
    {"name": "no-edits", "tools": ["strict_*"], "allow_edits": False, "timeout": "10m"},
    {
        "name": "grantable",
        "tools": ["shell_*"],
        "timeout": "10m",
        "grant_scopes": ["call", "session", "agent"],
        "max_grant": "1h",
    },
    {
        "name": "releases",
        "tools": ["release_*"],
        "timeout": "10m",
        "grant_scopes": ["call", "pattern"],
        "grant_pin": ["repo"],
        "max_grant_uses": 5,
        "max_grant": "1h",
    },
    {
        "name": "escalating",
        "tools": ["escalate_*"],
        "approvers": ["group:finance"],
        "timeout": "1h",
        "remind_after": "5m",
        "escalate_after": "10m",
        "escalate_approvers": ["group:ops"],
    },
]


class Clock:
    """A clock the tests move by hand."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> Any:
        return self.now


@pytest.fixture
def clock() -> Clock:
    """A fixed clock, moved by the test."""
    return Clock()


@pytest.fixture
def ruled(db_url: str, clock: Clock) -> Any:
    """A gate with rules that offer edits, reasons, grants, reminders and escalation; its
    clock is `clock` and its background jobs are left to the tests."""
    data = cfg.settings_data(db_url, sweep_interval_seconds=3600, followup_interval_seconds=3600)
    data["rules"] = OFFERING_RULES + data["rules"]
    settings = Settings(**data)
    server = ThreadServer(create_app(settings, clock=clock)).start()
    yield Gate(server, settings)
    server.stop()


def post(gate: Gate, token: str, path: str, body: Any = None) -> Any:
    """POST `body` as JSON to `path` with `token`."""
    with gate.client(token) as c:
        return c.post(path, json=body)


def audit_kinds(gate: Gate, rid: str) -> list[str]:
    """The kinds of a request's audit events, oldest first."""
    with gate.client(cfg.ADMIN) as c:
        return [e["kind"] for e in c.get(f"/v1/requests/{rid}/audit").json()]
