"""`make_view`: one pending request's read-model view for the channels' card tests.

Each card test file used to build its own `RequestView` field by field; they differ only in a
few values (the tool, its arguments, the ids), which each file now passes as overrides.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gate.decisions.readmodel import RequestView

NOW = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
REQUEST_ID = "01JD0000000000000000000000"
URL = f"https://gate.example/requests/{REQUEST_ID}"


def make_view(**overrides: Any) -> RequestView:
    """A pending single-approval `pay_vendor` request for alice or bob; any field can be
    overridden. `expires_at` is ten minutes after `created_at` unless given."""
    created_at: datetime = overrides.pop("created_at", NOW)
    fields: dict[str, Any] = {
        "id": REQUEST_ID,
        "status": "pending",
        "tool_name": "pay_vendor",
        "tool_args": {"amount": 60000, "vendor": "ACME"},
        "agent_id": "billing-agent",
        "user_id": "dave",
        "session_id": "s1",
        "org_id": None,
        "rule": "big-payments",
        "summary": "Pay ACME 60k",
        "context": {},
        "created_at": created_at,
        "expires_at": created_at + timedelta(minutes=10),
        "approvals_required": 1,
        "approvers": ["alice", "bob"],
        "votes": [],
        "decided_at": None,
        "decided_by": None,
        "decided_via": None,
        "reason": None,
        "on_timeout": "reject",
        "submitted_by": "billing-agent",
        "url": URL,
    }
    fields.update(overrides)
    return RequestView(**fields)
