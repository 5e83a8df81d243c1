"""SQLModel tables, all of them importable from here (what approvers own beside requests is
defined in `approver_tables`). No logic: status changes live in gate.decisions.machine."""

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import JSON, Column, Field, SQLModel

from gate.base.statuses import (
    DeliveryStatus,
    GrantStatus,
    RequestStatus,
    new_id,
    utcnow,
)
from gate.store.approver_tables import (
    ChatIdentity,
    IdentityLinkCode,
    Passkey,
    PasskeyChallenge,
    SignInBucket,
    WebSignIn,
)
from gate.store.columns import UTCDateTime, status_column


class ConfirmationRequest(SQLModel, table=True):
    """A tool call suspended until a person decides (or the deadline passes)."""

    __tablename__ = "confirmation_request"
    __table_args__ = (
        sa.Index("ix_request_status_expires", "status", "expires_at"),
        sa.Index("ix_request_created_at", "created_at"),
        sa.Index("ix_request_session", "session_id", "status"),
        sa.Index("ix_request_status_nudge", "status", "nudge_at"),
        # an agent's latest decisions, read when one of its calls is rejected
        # (gate.decisions.denials)
        sa.Index("ix_request_agent_decided", "agent_id", "decided_at"),
        # Idempotency keys are per submitting principal: another agent that knows a key gets
        # a request of its own, never the first agent's (or its approval).
        sa.UniqueConstraint("submitted_by", "idempotency_key", name="uq_request_submitter_key"),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    idempotency_key: str | None = Field(default=None, max_length=200)
    tool_name: str = Field(max_length=200)
    tool_args: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    agent_id: str | None = Field(default=None, max_length=200)
    user_id: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, max_length=200)
    org_id: str | None = Field(default=None, max_length=200)
    summary: str | None = Field(default=None, max_length=1000)
    context: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    rule: str | None = Field(default=None, max_length=200)
    status: str = Field(default=RequestStatus.pending, sa_column=status_column("pending"))
    #: who may decide, as resolved from the rule when the request was made
    approvers: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    approvals_required: int = Field(default=1)
    submitted_by: str | None = Field(default=None, max_length=200)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False)
    )
    expires_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    decided_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    decided_by: str | None = Field(default=None, max_length=200)
    decided_via: str | None = Field(default=None, max_length=50)
    reason: str | None = Field(default=None, max_length=4000)
    on_timeout: str = Field(default="reject", max_length=16)
    #: sha256 of tool name + canonical args (+ idempotency key): what an approval is bound to
    args_hash: str | None = Field(default=None, max_length=64)
    #: the arguments as an approver edited them (None: approved as asked)
    approved_args: dict[str, Any] | None = Field(
        default=None, sa_column=Column(JSON, nullable=True)
    )
    #: what the rule offered when the request was made (reject reasons, edits, grants, escalation)
    options: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    #: set when this call was let through by a grant instead of a person
    grant_id: str | None = Field(default=None, max_length=26)
    reminded_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    escalated_at: datetime | None = Field(
        default=None, sa_column=Column(UTCDateTime, nullable=True)
    )
    #: when the reminder job next has work here (a reminder or escalation due); None: none left
    nudge_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    #: what happened after approval, reported by the agent: "ran" | "failed" | "not_run"
    outcome: str | None = Field(default=None, max_length=16)
    #: the policy revision (`gate.policy.revision`) whose rule made this request
    policy_revision: str | None = Field(default=None, max_length=16)
    #: which stage of the rule's chain is waiting, from 0 (`gate.policy.stages`)
    stage: int = Field(
        default=0, sa_column=Column(sa.Integer, nullable=False, server_default=sa.text("0"))
    )
    #: when that stage began (None: when the request was made)
    stage_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    #: why the agent says the call is needed (its claim, untrusted text)
    justification: str | None = Field(default=None, max_length=4000)
    #: who said they are on it (acknowledged, not decided) and when: reminders and escalation
    #: stop (`gate.decisions.acknowledging`)
    acknowledged_by: str | None = Field(default=None, max_length=200)
    acknowledged_at: datetime | None = Field(
        default=None, sa_column=Column(UTCDateTime, nullable=True)
    )


class Vote(SQLModel, table=True):
    """One approver's verdict on one request (one row per person)."""

    __tablename__ = "vote"
    __table_args__ = (
        sa.UniqueConstraint("request_id", "approver", name="uq_vote_request_approver"),
    )

    id: int | None = Field(default=None, primary_key=True)
    request_id: str = Field(foreign_key="confirmation_request.id", max_length=26)
    approver: str = Field(max_length=200)
    verdict: str = Field(max_length=16)
    comment: str | None = Field(default=None, max_length=4000)
    via: str = Field(max_length=50)
    at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    #: the grant this approver chose with their approval ("session", 1800 s); on a quorum rule a
    #: grant is made only when every approving vote chose one
    grant_scope: str | None = Field(default=None, max_length=16)
    grant_seconds: int | None = Field(default=None)
    #: the chain stage the vote was cast in (`gate.policy.stages`): a stage counts only its own
    stage: int = Field(
        default=0, sa_column=Column(sa.Integer, nullable=False, server_default=sa.text("0"))
    )
    #: how the approver was authenticated (`gate.identity.authmethod.AuthMethod.to_json`); None on
    #: votes cast before it was recorded
    auth: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    #: what the approver chose for their grant beyond scope and time: `{"uses": n, "pin": [...]}`
    grant_terms: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


class Delivery(SQLModel, table=True):
    """Outbox row: one card post or update owed to one channel target."""

    __tablename__ = "delivery"
    __table_args__ = (
        sa.Index("ix_delivery_due", "status", "next_attempt_at"),
        sa.Index("ix_delivery_request", "request_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    request_id: str = Field(foreign_key="confirmation_request.id", max_length=26)
    channel: str = Field(max_length=50)
    target: str = Field(max_length=200)
    kind: str = Field(max_length=16)
    status: str = Field(default=DeliveryStatus.pending, sa_column=status_column("pending"))
    attempts: int = Field(default=0)
    next_attempt_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False)
    )
    message_ref: str | None = Field(default=None, max_length=200)
    last_error: str | None = Field(default=None, max_length=2000)
    claimed_until: datetime | None = Field(
        default=None, sa_column=Column(UTCDateTime, nullable=True)
    )
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False)
    )
    sent_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    # On a card's post row, kept by PostgreSQL's marks of the card's updates (see
    # `gate.delivery.sending.mark_sent`): the newest update marked sent, and the latest time one was
    # marked, before and after the last mark. Each mark moves them in its own statement,
    # after waiting for this row, so it sees every mark made before it, on any replica.
    newest_update_sent: int | None = Field(default=None)
    update_marked_at: datetime | None = Field(
        default=None, sa_column=Column(UTCDateTime, nullable=True)
    )
    update_marked_before: datetime | None = Field(
        default=None, sa_column=Column(UTCDateTime, nullable=True)
    )


class AuditEvent(SQLModel, table=True):
    """Append-only record of everything that happened to a request."""

    __tablename__ = "audit_event"
    __table_args__ = (sa.Index("ix_audit_request", "request_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    request_id: str = Field(foreign_key="confirmation_request.id", max_length=26)
    at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    kind: str = Field(max_length=50)
    actor: str | None = Field(default=None, max_length=200)
    via: str | None = Field(default=None, max_length=50)
    detail: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    #: tamper evidence: sha256 over this event and the previous event's hash for the request
    prev_hash: str | None = Field(default=None, max_length=64)
    chain_hash: str | None = Field(default=None, max_length=64)


class Grant(SQLModel, table=True):
    """ "Approve, and allow the same for 30 minutes": later matching calls skip the human."""

    __tablename__ = "approval_grant"
    __table_args__ = (sa.Index("ix_grant_lookup", "status", "tool_name", "expires_at"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=26)
    request_id: str = Field(foreign_key="confirmation_request.id", max_length=26)
    rule: str | None = Field(default=None, max_length=200)
    tool_name: str = Field(max_length=200)
    #: "call" (same arguments), "session" (this tool in this session), "agent" (this tool, agent)
    scope: str = Field(max_length=16)
    session_id: str | None = Field(default=None, max_length=200)
    agent_id: str | None = Field(default=None, max_length=200)
    args_hash: str | None = Field(default=None, max_length=64)
    #: the authenticated principal (token name) that submitted the approved request: only its
    #: own later calls ride the grant, whatever agent or session ids another caller claims
    submitted_by: str | None = Field(default=None, max_length=200)
    #: who had to approve, and how many, under the rule the grant was made in: a grant never
    #: covers a call whose rule names other approvers or a different quorum
    approvers: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    approvals_required: int = Field(default=1)
    created_by: str = Field(max_length=200)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False)
    )
    expires_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    status: str = Field(default=GrantStatus.active, sa_column=status_column("active"))
    ended_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    ended_by: str | None = Field(default=None, max_length=200)
    uses: int = Field(default=0)
    #: a "pattern" grant's pinned arguments (name -> the approved value); None on other scopes
    pinned: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    #: how many calls the grant may let through; None: any number until it expires
    max_uses: int | None = Field(default=None)


class DecisionLogEntry(SQLModel, table=True):
    """One answer `POST /v1/gate` gave (allow, deny, ask, granted): the decision log.

    Written in batches off the hot path (`gate.decisions.decision_log`), one table for every
    replica; rows older than `[decision_log].retention` are pruned, and `facts` (the call's whole
    arguments and metadata, which replay needs) is cleared after `args_retention`.
    """

    __tablename__ = "decision_log"
    __table_args__ = (
        sa.Index("ix_decision_log_at", "at"),
        sa.Index("ix_decision_log_agent", "agent_id", "id"),
        sa.Index("ix_decision_log_tool", "tool_name", "id"),
        sa.Index("ix_decision_log_rule", "rule", "id"),
        sa.Index("ix_decision_log_answer", "answer", "id"),
        # only the rows still holding whole arguments: the prune finds the ones to clear
        # without reading the rest of the month
        sa.Index(
            "ix_decision_log_facts",
            "at",
            sqlite_where=sa.text("facts IS NOT NULL"),
            postgresql_where=sa.text("facts IS NOT NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    agent_id: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, max_length=200)
    user_id: str | None = Field(default=None, max_length=200)
    #: the token (principal) that sent the call
    submitted_by: str | None = Field(default=None, max_length=200)
    tool_name: str = Field(max_length=200)
    #: `gate.asking.binding.call_hash` of the tool and arguments (no idempotency key)
    args_hash: str = Field(max_length=64)
    #: the arguments as every surface shows them (`gate.text.untrusted.mask_value`)
    masked_args: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    #: {"args", "metadata"} as sent, for `gate policy replay`; SQL NULL once
    #: `[decision_log].args_retention` passed (or when it is 0)
    facts: dict[str, Any] | None = Field(
        default=None, sa_column=Column(sa.JSON(none_as_null=True), nullable=True)
    )
    rule: str | None = Field(default=None, max_length=200)
    policy_revision: str = Field(max_length=16)
    #: "allow" | "deny" | "ask" | "granted" (an ask a grant answered at once)
    answer: str = Field(max_length=16)
    request_id: str | None = Field(default=None, max_length=26)
    #: what shadow rules would have answered (`gate.policy.shadow.ShadowOutcome.as_dict`),
    #: None when no shadow rule was tried
    shadow: list[dict[str, Any]] | None = Field(
        default=None, sa_column=Column(sa.JSON(none_as_null=True), nullable=True)
    )


class AgentTrip(SQLModel, table=True):
    """An agent whose rejections tripped it (`gate.decisions.denials`): while `reset_at` is unset
    every call of that agent is asked. Kept after a reset, as the record of who reset it and
    when."""

    __tablename__ = "agent_trip"
    __table_args__ = (
        # one active trip per agent: two replicas tripping it together insert one row
        sa.Index(
            "uq_agent_trip_active",
            "agent",
            unique=True,
            sqlite_where=sa.text("reset_at IS NULL"),
            postgresql_where=sa.text("reset_at IS NULL"),
        ),
        sa.Index("ix_agent_trip_agent", "agent", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    #: the call's agent_id, or the name of the token that sent it when it names none
    agent: str = Field(max_length=200)
    #: the words cards and pages show ("3 rejections in a row")
    reason: str = Field(max_length=500)
    #: the rejected request that tripped it
    request_id: str | None = Field(default=None, max_length=26)
    tripped_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    reset_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    reset_by: str | None = Field(default=None, max_length=200)


class WebhookDelivery(SQLModel, table=True):
    """Outbox row: one signed message owed to one `[[webhooks]]` receiver.

    Written in the transaction of the change it reports (`gate.store.webhooks.owe`); its
    `payload` is fixed then, so every attempt and a resend carry the same `msg_id` and bytes.
    """

    __tablename__ = "webhook_delivery"
    __table_args__ = (
        sa.Index("ix_webhook_delivery_due", "status", "next_attempt_at"),
        sa.Index("ix_webhook_delivery_request", "request_id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    #: the Standard Webhooks `webhook-id`: the same on every attempt, so receivers dedupe
    msg_id: str = Field(max_length=40, unique=True)
    webhook: str = Field(max_length=100)
    event: str = Field(max_length=16)
    request_id: str = Field(max_length=26)
    payload: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    status: str = Field(default=DeliveryStatus.pending, sa_column=status_column("pending"))
    attempts: int = Field(default=0)
    next_attempt_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False)
    )
    claimed_until: datetime | None = Field(
        default=None, sa_column=Column(UTCDateTime, nullable=True)
    )
    #: what the last failed attempt got (an HTTP status and the start of the body, or the
    #: network error)
    last_error: str | None = Field(default=None, max_length=500)
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False)
    )
    sent_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))


class CountedCall(SQLModel, table=True):
    """A call a history term counts (`gate.policy.history`): let through at once by policy
    (`request_id` unset) or asked (`request_id` set: it counts while its request is pending or
    approved). Written only for tools some rule's history term names."""

    __tablename__ = "counted_call"
    __table_args__ = (
        # `history.count`/`history.sum`: one caller's calls within a window
        sa.Index("ix_counted_call_caller_at", "caller", "at"),
        # `history.session_count`/`history.session_sum`: one caller's session within a window
        sa.Index("ix_counted_call_session_at", "caller", "session_id", "at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    #: who made the call: the name of the token that sent it (never the agent's own agent_id)
    caller: str = Field(max_length=200)
    session_id: str | None = Field(default=None, max_length=200)
    tool_name: str = Field(max_length=200)
    request_id: str | None = Field(default=None, max_length=26)
    #: the call's top-level numeric arguments (`history.sum` adds them up)
    numbers: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


__all__ = [
    "AgentTrip",
    "AuditEvent",
    "ChatIdentity",
    "ConfirmationRequest",
    "CountedCall",
    "DecisionLogEntry",
    "Delivery",
    "Grant",
    "IdentityLinkCode",
    "Passkey",
    "PasskeyChallenge",
    "SignInBucket",
    "UTCDateTime",
    "Vote",
    "WebSignIn",
    "WebhookDelivery",
]
