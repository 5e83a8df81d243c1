"""The store's typed rows: a request and a vote as the hot paths read, change and answer from.

Slotted dataclasses, so under mypy strict a misspelt field (`row.expires_att`) is an error
and at run time it raises instead of making a new attribute. They are not frozen: the
state machine updates the row it decided on in place (the status the compare-and-set
wrote, the audit chain's new head), and the caller builds its answer from that same row,
nothing read back. A row is attribute-compatible with the ORM models, so the read model
takes either (`gate.decisions.readmodel.RequestData`).

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
    policy_revision: str | None = None
    stage: int
    stage_at: datetime | None
    justification: str | None
    acknowledged_by: str | None = None
    acknowledged_at: datetime | None = None
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
    #: the chain stage it was cast in (`gate.policy.stages`)
    stage: int = 0
    #: how the approver was authenticated (`gate.identity.authmethod.AuthMethod.to_json`)
    auth: dict[str, Any] | None = None
    #: the grant's uses and pinned arguments the approver chose (`{"uses": n, "pin": [...]}`)
    grant_terms: dict[str, Any] | None = None

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


def first_vote_decides(approvals_required: int, options: dict[str, Any]) -> bool:
    """Whether a pending request's first vote, either way, ends it: one approval approves,
    one rejection rejects, no filter and no later stage. Then a decision reads no votes (the
    fast path whose statements `tests/core/test_statement_counts.py` counts). The keys are
    the ones `gate.policy.offers.Offers.to_options` writes only for a chain
    (`gate.policy.stages`)."""
    return (
        approvals_required == 1
        and not options.get("stages")
        and int(options.get("rejections") or 1) == 1
        and not options.get("via")
        and options.get("counted") is None
    )


def new_request(**values: Any) -> RequestRow:
    """A request not yet written: every column, the unset ones at their defaults."""
    fields: dict[str, Any] = dict.fromkeys(REQUEST_FIELDS)
    fields |= {"status": "pending", "approvals_required": 1, "on_timeout": "reject", "stage": 0}
    fields |= {"approvers": [], "context": {}, "options": {}, "tool_args": {}}
    # nothing written yet: the first event has no predecessor
    return RequestRow(**(fields | values), audit_head=None)


@dataclass(slots=True, kw_only=True)
class DecisionRow:
    """One decision-log row (`decision_log`), as it is written and read back."""

    id: int | None
    at: datetime
    agent_id: str | None
    session_id: str | None
    user_id: str | None
    submitted_by: str | None
    tool_name: str
    args_hash: str
    masked_args: dict[str, Any]
    facts: dict[str, Any] | None
    rule: str | None
    policy_revision: str
    answer: str
    request_id: str | None
    #: what shadow rules would have answered (None: none was tried)
    shadow: list[dict[str, Any]] | None = None


#: a decision-log row's columns, in table order
DECISION_FIELDS: tuple[str, ...] = tuple(DecisionRow.__dataclass_fields__)


@dataclass(slots=True, kw_only=True)
class ReplayRow:
    """A decision-log row as `gate policy replay` reads it: the call, what it was answered,
    and for an ask, how its request ended (`status`, `decided_by`)."""

    entry: DecisionRow
    status: str | None
    decided_by: str | None


@dataclass(slots=True)
class TripRow:
    """An agent's trip (`gate.decisions.denials`): active while `reset_at` is None."""

    agent: str
    reason: str
    request_id: str | None
    tripped_at: datetime
    reset_at: datetime | None = None
    reset_by: str | None = None


# -- history, as the stats page and `gate policy suggest` read it ----------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AskRow:
    """One request a person was asked about: its rule, when, and how it ended."""

    id: str
    rule: str | None
    tool_name: str
    status: str
    created_at: datetime
    decided_at: datetime | None
    decided_via: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteTiming:
    """One vote and when its card was first shown on the surface the vote came from."""

    request_id: str
    approver: str
    verdict: str
    via: str
    at: datetime
    #: the first card post sent on the vote's channel, else the request's creation (the
    #: console lists a request the moment it is made); gate records no page views
    shown_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class DecidedCall:
    """A request people decided (approved or rejected, not by timeout or grant), with who
    voted which way."""

    id: str
    tool_name: str
    tool_args: dict[str, Any]
    agent_id: str | None
    user_id: str | None
    rule: str | None
    status: str
    created_at: datetime
    decided_at: datetime
    #: approved with arguments an approver changed: the call as asked was not accepted
    edited: bool
    #: (approver, verdict) of each vote, oldest first
    votes: tuple[tuple[str, str], ...]


# -- passkeys (gate.store.passkeys) -----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PasskeyRow:
    """An approver's registered WebAuthn credential."""

    id: str
    credential_id: str
    approver: str
    label: str
    public_key: bytes
    sign_count: int
    transports: tuple[str, ...]
    created_at: datetime
    last_used_at: datetime | None = None
    removed_at: datetime | None = None
    removed_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChallengeRow:
    """A WebAuthn challenge gate issued (`gate.store.tables.PasskeyChallenge`)."""

    nonce: str
    approver: str
    purpose: str
    request_id: str | None
    args_hash: str | None
    expires_at: datetime
