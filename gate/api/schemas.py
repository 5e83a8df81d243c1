"""JSON shapes of the v1 API (requests in, responses out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from gate.decisions.readmodel import RequestView
from gate.inputs.bodies import (
    _Body,
)

# -- what a stored JSON value may be ----------------------------------------------------------


class AuthPublic(BaseModel):
    """How an approver was authenticated when they voted (`gate.identity.authmethod.AuthMethod`)."""

    model_config = ConfigDict(from_attributes=True)

    kind: Literal["password", "proxy", "oidc", "chat", "token", "local", "webauthn"]
    issuer: str | None = Field(default=None, description="oidc: the ID token's issuer")
    subject: str | None = Field(default=None, description="oidc: the ID token's subject")
    auth_time: datetime | None = Field(
        default=None, description="oidc: when the person last authenticated at the provider"
    )
    acr: str | None = Field(default=None, description="oidc: the authentication context class")
    platform: str | None = Field(default=None, description="chat: the channel clicked in")
    user_id: str | None = Field(default=None, description="chat: the person's id there")
    bound_by: Literal["configured_id", "idp_claim", "link", "email"] | None = Field(
        default=None, description="chat: how that id maps to the approver"
    )
    token: str | None = Field(default=None, description="token: the [[tokens]] entry's name")
    credential_id: str | None = Field(
        default=None, description="webauthn: the passkey's credential id (base64url)"
    )
    signed_in_by: Literal["password", "proxy", "oidc", "local"] | None = Field(
        default=None, description="webauthn: the console sign-in the passkey signed in"
    )


class VotePublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    approver: str
    verdict: str
    via: str
    at: datetime
    comment: str | None
    stage: int = Field(default=0, description="the chain stage it was cast in, from 0")
    auth: AuthPublic | None = Field(
        default=None, description="how the approver was authenticated (null: not recorded)"
    )


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
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="what the agent said about where the call comes from (cwd, session, "
        "permission mode, metadata)",
    )
    org_id: str | None = None
    submitted_by: str | None = Field(default=None, description="the token that asked")
    policy_revision: str | None = Field(
        default=None, description="the policy revision whose `rule` made the request"
    )
    justification: str | None = Field(
        default=None, description="why the agent says the call is needed (its claim)"
    )
    stage: int = Field(default=0, description="the chain stage waiting (or that decided), from 0")
    stage_label: str | None = Field(
        default=None, description='"stage 2 of 3 (finance)"; null for a rule without stages'
    )
    decided_stages: list[str] = Field(
        default_factory=list, description="who approved each stage before the waiting one"
    )
    acknowledged_by: str | None = Field(
        default=None,
        description="the approver who said they are on it: reminders and escalation stopped",
    )
    acknowledged_at: datetime | None = Field(default=None, description="when they said so")

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
    #: how many calls it may let through in all (None: no count, only time)
    max_uses: int | None = None
    #: a pattern grant's pinned arguments and their approved values (the agent's values, raw as
    #: in a request's `tool_args`)
    pinned: dict[str, Any] | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def uses_left(self) -> int | None:
        """How many more calls it may let through (None: not counted)."""
        return None if self.max_uses is None else max(0, self.max_uses - self.uses)


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


class AgentResetBody(_Body):
    """`POST /v1/agents/reset`: the agent, its agent_id or its token's name
    (gate.decisions.denials)."""

    agent: str = Field(min_length=1, max_length=200)


class RequestPage(BaseModel):
    """One page of `GET /v1/requests`."""

    items: list[RequestPublic]
    next_cursor: str | None


class DecisionPublic(BaseModel):
    """One decision-log row: an answer `POST /v1/gate` gave (arguments masked)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    agent_id: str | None
    session_id: str | None
    user_id: str | None
    submitted_by: str | None = Field(description="the token that sent the call")
    tool_name: str
    args_hash: str = Field(description="sha256 of the tool and its arguments")
    masked_args: dict[str, Any] = Field(description="the arguments, secrets masked")
    rule: str | None = Field(description="the rule that decided (null: no rule matched)")
    policy_revision: str
    answer: str = Field(description="allow, deny, ask, or granted (a grant answered an ask)")
    request_id: str | None = Field(description="the request an ask made (or a grant approved)")
    shadow: list[dict[str, Any]] | None = Field(
        default=None,
        description='what shadow rules would have answered: [{"rule", "would", "flip"}]',
    )


class DecisionPage(BaseModel):
    """One page of `GET /v1/decisions`, newest first."""

    items: list[DecisionPublic]
    next_cursor: int | None
