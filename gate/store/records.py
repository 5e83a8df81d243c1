"""The store's typed rows: a request and a vote as the hot paths read, change and answer from.

Slotted dataclasses, so under mypy strict a misspelt field (`row.expires_att`) is an error
and at run time it raises instead of making a new attribute. They are not frozen: the
state machine updates the row it decided on in place (the status the compare-and-set
wrote, the audit chain's new head), and the caller builds its answer from that same row,
nothing read back. A row is attribute-compatible with the ORM models, so the read model
takes either (`gate.readmodel.RequestData`).

`tests/core/test_store_types.py` checks that the fields are the table's columns, and runs
mypy on a probe with a misspelt field.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal


class Unread:
    """The type of `UNREAD`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNREAD"


#: `audit_head` not read yet (None is a real head: a request with no event)
UNREAD: Final = Unread()
#: what a row knows of its request's audit chain head
Head = str | None | Unread

#: a compare-and-set's guard on the deadline: none, `expires_at > :before` (a person's
#: decision lands only in time) or `expires_at = :deadline` (an expiry ends the request only
#: while its deadline is the one it read: an extension committed meanwhile wins)
Guard = Literal["", "before", "deadline"]
GUARDS: tuple[Guard, ...] = ("", "before", "deadline")


@dataclass(slots=True, kw_only=True)
class RequestRow:
    """A request's columns (table order, `confirmation_request`), plus what the store knows
    of how it was read."""

    id: str
    idempotency_key: str | None
    tool_name: str
    tool_args: dict[str, Any]
    agent_id: str | None
    user_id: str | None
    session_id: str | None
    org_id: str | None
    summary: str | None
    context: dict[str, Any]
    rule: str | None
    status: str
    approvers: list[str]
    approvals_required: int
    submitted_by: str | None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    decided_by: str | None
    decided_via: str | None
    reason: str | None
    on_timeout: str
    args_hash: str | None
    approved_args: dict[str, Any] | None
    options: dict[str, Any]
    grant_id: str | None
    reminded_at: datetime | None
    escalated_at: datetime | None
    nudge_at: datetime | None
    outcome: str | None
    #: the request's audit chain head as of this transaction's lock (`UNREAD`: not read)
    audit_head: Head = UNREAD
    #: read under the row's lock (PostgreSQL): nothing else can change it before the commit
    locked: bool = False
    #: read without the lock (PostgreSQL): a change built on it is made only if the
    #: compare-and-set finds the row and its head as read (`gate.store.decisions`)
    optimistic: bool = False

    def update(self, values: dict[str, Any]) -> None:
        """Set the columns `values` names (what a compare-and-set wrote, a row read again)."""
        for name, value in values.items():
            setattr(self, name, value)


@dataclass(slots=True, kw_only=True)
class VoteRow:
    """A vote's columns (its request's id is the request's)."""

    id: int | None
    approver: str
    verdict: str
    comment: str | None
    via: str
    at: datetime
    grant_scope: str | None = None
    grant_seconds: int | None = None
    #: how the approver was authenticated (`gate.authmethod.AuthMethod.to_json`)
    auth: dict[str, Any] | None = None

    def update(self, values: dict[str, Any]) -> None:
        """Set the columns `values` names (an approver changing their vote)."""
        for name, value in values.items():
            setattr(self, name, value)


#: a request's columns (what `RequestRow` carries of the table, in table order)
REQUEST_FIELDS: tuple[str, ...] = tuple(
    name
    for name in RequestRow.__dataclass_fields__
    if name not in ("audit_head", "locked", "optimistic")
)
#: a vote's columns as a `VoteRow` carries them
VOTE_FIELDS: tuple[str, ...] = tuple(VoteRow.__dataclass_fields__)


def new_request(**values: Any) -> RequestRow:
    """A request not yet written: every column, the unset ones at their defaults."""
    fields: dict[str, Any] = dict.fromkeys(REQUEST_FIELDS)
    fields |= {"status": "pending", "approvals_required": 1, "on_timeout": "reject"}
    fields |= {"approvers": [], "context": {}, "options": {}, "tool_args": {}}
    # nothing written yet: the first event has no predecessor
    return RequestRow(**(fields | values), audit_head=None)
