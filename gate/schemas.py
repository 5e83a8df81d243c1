"""JSON shapes of the v1 API (requests in, responses out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gate.views import RequestView

SUMMARY_MAX = 1000


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


class DecisionBody(BaseModel):
    """`POST /v1/requests/{id}/decision`."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["approve", "reject"]
    comment: str | None = Field(default=None, max_length=4000)


class CancelBody(BaseModel):
    """`POST /v1/requests/{id}/cancel` (the body is optional)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=4000)


class RequestPage(BaseModel):
    """One page of `GET /v1/requests`."""

    items: list[RequestPublic]
    next_cursor: str | None
