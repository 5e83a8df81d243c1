"""JSON shapes of the v1 API (requests in, responses out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gate.views import RequestView

SUMMARY_MAX = 1000
#: the longest `expires_in` a caller may give (30 days: past any sensible rule timeout)
EXPIRES_IN_MAX = 30 * 24 * 3600.0


class GateCall(BaseModel):
    """`POST /v1/gate`: one tool call an agent wants to make."""

    model_config = ConfigDict(extra="forbid")

    tool_name: str = Field(min_length=1, max_length=200)
    tool_args: dict[str, Any] = Field(default_factory=dict)
    agent_id: str | None = Field(default=None, max_length=200)
    user_id: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, max_length=200)
    org_id: str | None = Field(default=None, max_length=200)
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    summary: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict)
    expires_in: float | None = Field(
        default=None,
        gt=0,
        le=EXPIRES_IN_MAX,
        description="seconds until the caller gives up; the request expires no later",
    )

    @field_validator("summary")
    @classmethod
    def _cut_summary(cls, value: str | None) -> str | None:
        # A long summary is the model being verbose, not bad input: keep the call, cut the text.
        if value is not None and len(value) > SUMMARY_MAX:
            return value[: SUMMARY_MAX - 1] + "…"
        return value


class VotePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    approver: str
    verdict: str
    via: str
    at: datetime
    comment: str | None


class RequestPublic(BaseModel):
    """A request as the API shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    status: str
    tool_name: str
    tool_args: dict[str, Any]
    agent_id: str | None
    user_id: str | None
    session_id: str | None
    rule: str | None
    summary: str | None
    created_at: datetime
    expires_at: datetime
    approvals_required: int
    approvers: list[str]
    votes: list[VotePublic]
    decided_at: datetime | None
    decided_by: str | None
    decided_via: str | None
    reason: str | None
    url: str
    args_hash: str = Field(description="sha256 binding of tool + the args that will run + call id")
    approved_args: dict[str, Any] | None = Field(
        default=None, description="the arguments as edited by the approver (null: as asked)"
    )
    options: dict[str, Any] = Field(default_factory=dict)
    grant_id: str | None = None
    outcome: str | None = None

    @classmethod
    def of(cls, view: RequestView) -> RequestPublic:
        """From a RequestView."""
        return cls.model_validate(view)


class GateAnswer(BaseModel):
    """What policy said about a call, and the request when a human must decide."""

    decision: Literal["allow", "deny", "ask"]
    rule: str | None
    reason: str
    request: RequestPublic | None = None


class GrantRequest(BaseModel):
    """Attach a time-boxed grant to an approval."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["call", "session", "agent"]
    duration: str = Field(description='how long, e.g. "30m"', max_length=20)


class DecisionBody(BaseModel):
    """`POST /v1/requests/{id}/decision`."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["approve", "reject"]
    comment: str | None = Field(default=None, max_length=4000)
    #: approve with these arguments instead (the full object)
    edited_args: dict[str, Any] | None = None
    #: preset reject reasons from the rule's `reject_reasons`
    reasons: list[str] = Field(default_factory=list, max_length=20)
    grant: GrantRequest | None = None


class ExtendBody(BaseModel):
    """`POST /v1/requests/{id}/extend`."""

    model_config = ConfigDict(extra="forbid")

    by: str = Field(description='more time, e.g. "15m"', max_length=20)


class OutcomeBody(BaseModel):
    """`POST /v1/requests/{id}/outcome`: what happened after approval."""

    model_config = ConfigDict(extra="forbid")

    outcome: Literal["ran", "failed", "not_run"]
    summary: str | None = Field(default=None, max_length=4000)


class GrantPublic(BaseModel):
    """A time-boxed grant as the API shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    request_id: str
    rule: str | None
    tool_name: str
    scope: str
    session_id: str | None
    agent_id: str | None
    created_by: str
    created_at: datetime
    expires_at: datetime
    status: str
    ended_at: datetime | None
    ended_by: str | None
    uses: int


class AuditPublic(BaseModel):
    """One audit event with its place in the tamper-evident chain."""

    model_config = ConfigDict(from_attributes=True)

    id: int | None
    at: datetime
    kind: str
    actor: str | None
    via: str | None
    detail: dict[str, Any]
    prev_hash: str | None
    chain_hash: str | None


class CancelBody(BaseModel):
    """`POST /v1/requests/{id}/cancel` (the body is optional)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=4000)


class RequestPage(BaseModel):
    """One page of `GET /v1/requests`."""

    items: list[RequestPublic]
    next_cursor: str | None
