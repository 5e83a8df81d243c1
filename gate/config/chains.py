"""The approval-chain settings of a `[[rules]]` entry: stages, vote thresholds, the agent's
justification and self-approval (a part of `gate.config.settings`, kept apart for its size; import
them from `gate.config.settings`). `gate.policy.rules` compiles them into
`gate.policy.stages.Stage`s.

    [[rules]]
    name = "payments"
    tools = ["pay_*"]
    justification = "required"              # the agent must say why (else a 422)
    votes = { approve = 2, reject = 2, groups = ["finance"] }

    [[rules.stages]]
    name = "team lead"
    approvers = ["group:leads"]
    fallback_approvers = ["carol"]          # when no lead can be asked
    escalate_after = "30m"
    escalate_approvers = ["group:managers"]
    timeout = "4h"                          # the stage denies by itself after this
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gate.config.durations import parse_duration

#: the most stages one rule may list: a chain longer than this is a process, not a check
MAX_STAGES = 5
#: what a rule asks of the agent's justification: nothing, a 422 without one, or a request
#: that nobody may approve without one (it can still be rejected or expire)
Justification = Literal["optional", "required", "to_review"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VoteSettings(_Strict):
    """`votes = { approve = 2, reject = 2, groups = ["finance"], via = ["web"] }`: how many
    approvals decide, how many rejections, and which votes count at all.

    A vote that would not count is refused when it is cast (the person is told why), so
    nobody believes they voted when they did not. `signin` is reserved for the sign-in
    method (the OIDC work): it is refused until then (`gate.policy.stages.VoteFilter`)."""

    approve: int = Field(default=1, ge=1, le=20)
    reject: int = Field(default=1, ge=1, le=20)
    #: only votes of members of these groups count (empty: everyone who may decide)
    groups: list[str] = Field(default_factory=list)
    #: only votes cast from these surfaces count ("web", "api", "slack", ...; empty: any).
    #: Any name is accepted, since channels are plug-ins; a typo only narrows the filter
    via: list[str] = Field(default_factory=list)


class StageSettings(_Strict):
    """One `[[rules.stages]]` entry: who decides this step, and what happens if they do not."""

    name: str | None = None
    #: names or "group:x"; asked first
    approvers: list[str] = Field(default_factory=list)
    #: asked instead when `approvers` resolve to nobody (an empty group, or only the requester)
    fallback_approvers: list[str] = Field(default_factory=list)
    #: added to who may decide once the stage has waited `escalate_after`
    escalate_approvers: list[str] = Field(default_factory=list)
    escalate_after: timedelta | None = None
    #: the stage denies by itself when nobody decided it within this (default: the rule's
    #: timeout); every stage's time counts from when it began
    timeout: timedelta | None = None
    #: approvers must write why they approve (a reject always needs a reason)
    justify: bool = False
    votes: VoteSettings = Field(default_factory=VoteSettings)

    _parse_durations = field_validator("escalate_after", "timeout", mode="before")(
        lambda v: None if v is None else _duration(v)
    )


class SelfApprovalSettings(_Strict):
    """`self_approval = { groups = ["oncall"] }`: members of these groups may approve a call
    they asked for themselves, with a reason, audited as self-approval. Refused otherwise."""

    groups: list[str] = Field(min_length=1)


def _duration(value: object) -> timedelta:
    return parse_duration(value)  # type: ignore[arg-type]
