"""Read-only views of a request: what channels render and what the API returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from gate.asking.binding import call_hash
from gate.base.statuses import RequestStatus
from gate.base.surfaces import surface_name
from gate.identity.authmethod import AuthMethod
from gate.policy.offers import Offers
from gate.policy.stages import Stage

if TYPE_CHECKING:  # the tables' rows are only passed through: channels never load the store
    from gate.store.tables import AuditEvent, Delivery


class RequestData(Protocol):
    """What a view is built from: a request's columns, as the store's rows and the ORM model
    both carry them (the read model imports neither)."""

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
    approved_args: dict[str, Any] | None
    options: dict[str, Any]
    grant_id: str | None
    outcome: str | None
    policy_revision: str | None
    stage: int
    stage_at: datetime | None
    justification: str | None
    acknowledged_by: str | None
    acknowledged_at: datetime | None


class VoteData(Protocol):
    """What a view shows of a vote."""

    approver: str
    verdict: str
    comment: str | None
    via: str
    at: datetime
    stage: int
    auth: dict[str, Any] | None


@dataclass(frozen=True)
class VoteView:
    approver: str
    verdict: str
    via: str
    at: datetime
    comment: str | None
    #: the chain stage it was cast in (`gate.policy.stages`)
    stage: int = 0
    #: how the approver was authenticated; None for votes cast before gate recorded it
    auth: AuthMethod | None = None


@dataclass(frozen=True)
class DeliveryView:
    id: int
    channel: str
    target: str
    kind: str
    status: str
    attempts: int
    message_ref: str | None
    last_error: str | None
    next_attempt_at: datetime


@dataclass(frozen=True)
class AuditView:
    id: int
    at: datetime
    kind: str
    actor: str | None
    via: str | None
    detail: dict[str, Any]


@dataclass(frozen=True)
class RequestView:
    """Everything a surface needs to show one request; plain data, safe to pass around."""

    id: str
    status: str
    tool_name: str
    tool_args: dict[str, Any]
    agent_id: str | None
    user_id: str | None
    session_id: str | None
    org_id: str | None
    rule: str | None
    summary: str | None
    context: dict[str, Any]
    created_at: datetime
    expires_at: datetime
    approvals_required: int
    approvers: list[str]
    votes: list[VoteView]
    decided_at: datetime | None
    decided_by: str | None
    decided_via: str | None
    reason: str | None
    on_timeout: str
    submitted_by: str | None
    url: str = ""
    deliveries: list[DeliveryView] = field(default_factory=list)
    audit: list[AuditView] = field(default_factory=list)
    #: hash of tool + the arguments that will run (+ call id): what an approval is bound to
    args_hash: str = ""
    #: arguments as an approver edited them; None when approved (or pending) as asked
    approved_args: dict[str, Any] | None = None
    #: what the rule offers: reject_reasons, allow_edits, editable, grant_scopes, ...
    options: dict[str, Any] = field(default_factory=dict)
    #: the same, typed: what every surface reads
    offers: Offers = field(default_factory=Offers)
    #: set when a grant, not a person, let this call through
    grant_id: str | None = None
    #: what the agent reported after approval: "ran" | "failed" | "not_run"
    outcome: str | None = None
    #: the policy revision whose rule made the request (None: made before gate recorded it)
    policy_revision: str | None = None
    idempotency_key: str | None = None
    #: the chain stage waiting (or the last one, once decided), from 0 (`gate.policy.stages`)
    stage: int = 0
    #: when that stage began (None: when the request was made)
    stage_at: datetime | None = None
    #: why the agent says the call is needed: its claim, untrusted text
    justification: str | None = None
    #: the approver who said they are on it (reminders and escalation stopped), and when
    acknowledged_by: str | None = None
    acknowledged_at: datetime | None = None

    @property
    def acknowledgement(self) -> str | None:
        """ "alice is on it (acknowledged 10:02 UTC)" while the request waits, else None."""
        if self.acknowledged_by is None or self.acknowledged_at is None or self.is_final:
            return None
        return f"{self.acknowledged_by} is on it (acknowledged {self.acknowledged_at:%H:%M} UTC)"

    @property
    def current_stage(self) -> Stage:
        """The stage whose turn it is (a rule without stages has one, implicit)."""
        return self.offers.stage(self.stage, self.approvals_required)

    @property
    def stage_label(self) -> str | None:
        """ "stage 2 of 3 (finance)", or None for a rule without stages."""
        stages = self.offers.stages
        return stages[self.stage].label(self.stage, len(stages)) if stages else None

    @property
    def decided_stages(self) -> list[str]:
        """Who decided each stage before the waiting one: "stage 1 of 3 (team lead):
        approved by alice, bob"."""
        stages = self.offers.stages
        said = []
        for index in range(min(self.stage, len(stages))):
            by = [v.approver for v in self.votes if v.stage == index and v.verdict == "approve"]
            said.append(f"{stages[index].label(index, len(stages))}: approved by {', '.join(by)}")
        return said

    @property
    def run_args(self) -> dict[str, Any]:
        """The arguments the call runs with: edited ones when an approver changed them."""
        return self.approved_args if self.approved_args is not None else self.tool_args

    @property
    def is_final(self) -> bool:
        return RequestStatus(self.status).is_final

    def binding_for(self, edited: dict[str, Any] | None) -> str:
        """The hash an approval with `edited` arguments (None: as asked) would be bound to:
        what a passkey signs (`gate.web.passkey_approval`)."""
        args = edited if edited is not None else self.tool_args
        return call_hash(self.tool_name, args, self.idempotency_key)

    @property
    def approvable_in_chat(self) -> bool:
        """Whether a chat card may offer to approve this request at all: not when its rule
        demands a step-up (`gate.policy.stepup`), which only the console's fresh single sign-on
        (or passkey) proves. Every channel asks this through `channels.decisions`."""
        return self.offers.step_up is None

    @property
    def approvals(self) -> list[VoteView]:
        """The approve votes the waiting stage counts so far."""
        counts = self.current_stage.filter.counts
        return [
            v
            for v in self.votes
            if v.verdict == "approve" and v.stage == self.stage and counts(v.approver, v.via)
        ]

    @property
    def rejections(self) -> list[VoteView]:
        """The reject votes the waiting stage counts so far (a rule may need more than one)."""
        counts = self.current_stage.filter.counts
        return [
            v
            for v in self.votes
            if v.verdict == "reject" and v.stage == self.stage and counts(v.approver, v.via)
        ]

    def outcome_sentence(self) -> str:
        """One line saying what happened: "Approved by alice in Slack"."""
        surface = surface_name(self.decided_via)
        match self.status:
            case "pending":
                return self._waiting()
            case "approved" if self.decided_via == "grant":
                return f"Allowed by a grant from {self.decided_by}"
            case "approved" if self.decided_via == "timeout":
                return "Approved automatically: nobody answered before the deadline"
            case "approved":
                return f"Approved by {self.decided_by} in {surface}"
            case "rejected":
                return f"Rejected by {self.decided_by} in {surface}"
            case "expired":
                return "Expired: nobody answered before the deadline"
            case "cancelled":
                return f"Cancelled by {self.decided_by or 'the agent'}"
        return self.status

    def _waiting(self) -> str:
        return _waiting_sentence(self)


def _waiting_sentence(view: RequestView) -> str:
    """ "Waiting for approval (1 of 2)"; in a chain, which stage waits and who decided the
    earlier ones; with a rejection threshold, the rejections so far."""
    stage = view.current_stage
    said = f"{len(view.approvals)} of {view.approvals_required}"
    if stage.rejections > 1:
        said += f"; {len(view.rejections)} of {stage.rejections} rejections"
    label = view.stage_label
    on_it = [view.acknowledgement] if view.acknowledgement else []
    if label is None:
        return "; ".join([f"Waiting for approval ({said})", *on_it])
    return "; ".join([f"Waiting for {label} ({said})", *view.decided_stages, *on_it])


def build_view(
    req: RequestData,
    votes: Sequence[VoteData],
    *,
    public_url: str,
    deliveries: list[Delivery] | None = None,
    audit: list[AuditEvent] | None = None,
    like: RequestView | None = None,
) -> RequestView:
    """Assemble a RequestView from rows (ORM objects or the store's typed rows);
    `like`, a view built before from the same row objects, lends what they still share."""
    args_hash, offers = _derived(req, like)
    return RequestView(
        id=req.id,
        status=req.status,
        tool_name=req.tool_name,
        tool_args=req.tool_args,
        agent_id=req.agent_id,
        user_id=req.user_id,
        session_id=req.session_id,
        org_id=req.org_id,
        rule=req.rule,
        summary=req.summary,
        context=req.context,
        created_at=req.created_at,
        expires_at=req.expires_at,
        approvals_required=req.approvals_required,
        approvers=list(req.approvers),
        votes=[_vote_view(v) for v in votes],
        decided_at=req.decided_at,
        decided_by=req.decided_by,
        decided_via=req.decided_via,
        reason=req.reason,
        on_timeout=req.on_timeout,
        submitted_by=req.submitted_by,
        url=f"{public_url.rstrip('/')}/requests/{req.id}",
        deliveries=_deliveries(deliveries),
        audit=[AuditView(a.id or 0, a.at, a.kind, a.actor, a.via, a.detail) for a in audit or []],
        args_hash=args_hash,
        approved_args=req.approved_args,
        options=req.options,
        offers=offers,
        grant_id=req.grant_id,
        outcome=req.outcome,
        idempotency_key=req.idempotency_key,
        policy_revision=req.policy_revision,
        stage=req.stage,
        stage_at=req.stage_at,
        justification=req.justification,
        acknowledged_by=req.acknowledged_by,
        acknowledged_at=req.acknowledged_at,
    )


def _deliveries(deliveries: list[Delivery] | None) -> list[DeliveryView]:
    return [
        DeliveryView(
            d.id or 0,
            d.channel,
            d.target,
            d.kind,
            d.status,
            d.attempts,
            d.message_ref,
            d.last_error,
            d.next_attempt_at,
        )
        for d in deliveries or []
    ]


def _vote_view(vote: VoteData) -> VoteView:
    return VoteView(
        vote.approver,
        vote.verdict,
        vote.via,
        vote.at,
        vote.comment,
        stage=vote.stage,
        auth=AuthMethod.from_json(vote.auth),
    )


def _derived(req: RequestData, like: RequestView | None) -> tuple[str, Offers]:
    """(the call's hash, the offers) of `req`: `like`'s, where it was built from the very same
    objects the row still holds (a decision's view before its change), else computed."""
    if like is None:
        return binding_of(req), Offers.from_options(req.options)
    same_call = (
        req.tool_args is like.tool_args
        and req.approved_args is like.approved_args
        and req.tool_name == like.tool_name
        and req.idempotency_key == like.idempotency_key
    )
    return (
        like.args_hash if same_call else binding_of(req),
        like.offers if req.options is like.options else Offers.from_options(req.options),
    )


def binding_of(req: RequestData) -> str:
    """The hash an approval of `req` is bound to: what will run, not what was asked."""
    args = req.approved_args if req.approved_args is not None else req.tool_args
    return call_hash(req.tool_name, args, req.idempotency_key)
