"""What a state-machine step did: the outcomes every use case and surface reports.

`gate.decisions.machine` returns them (callers write `outcomes.Changed`, ...);
they carry only what was decided, never a session or a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gate.base.statuses import RequestStatus, Verdict


@dataclass(frozen=True)
class Changed:
    """The request moved to `status` in this transaction (by whom and how: for the log)."""

    request_id: str
    status: RequestStatus
    tool_name: str | None = None
    rule: str | None = None
    by: str | None = None
    via: str | None = None


@dataclass(frozen=True)
class Voted:
    """The vote counted but quorum is not reached yet; the request stays pending."""

    request_id: str
    approvals: int
    required: int
    #: "reject" for a rejection short of the rule's rejection threshold
    verdict: str = "approve"
    #: the rejections so far and how many reject (a rule may need more than one)
    rejections: int = 0
    rejections_required: int = 1
    #: the chain stage that decides now, when this approval completed the one before
    next_stage: str | None = None


@dataclass(frozen=True)
class AlreadyFinal:
    """The request had already finished; nothing changed."""

    request_id: str
    status: RequestStatus
    decided_by: str | None
    decided_at: datetime | None
    decided_via: str | None


@dataclass(frozen=True)
class AlreadyVoted:
    """This approver had already cast this verdict; it is not counted twice."""

    request_id: str
    approver: str
    verdict: Verdict


@dataclass(frozen=True)
class Extended:
    """The pending request's deadline moved."""

    request_id: str
    until: datetime


@dataclass(frozen=True)
class Acknowledged:
    """Someone said they are on the pending request (`by`, at `at`): reminders and
    escalation stop; `already` when it was acknowledged before this (by `by`)."""

    request_id: str
    by: str
    at: datetime
    already: bool = False


@dataclass(frozen=True)
class Missing:
    """No request has that id."""

    request_id: str


Outcome = Changed | Voted | AlreadyFinal | AlreadyVoted | Missing | Extended | Acknowledged
