"""Approval chains: the stages a request is decided in, and how each stage counts votes.

A rule's stages (`[[rules.stages]]`, `gate.config.chains`) are compiled by policy into
`Stage`s with their approvers resolved to names, then frozen onto each request with the rest
of its offers (`Offers.stages`), so editing gate.toml never changes a waiting request. A rule
without stages has one implicit stage made of its own keys (`approvals_required`, `votes`,
`approvers_justify`): it is decided exactly as before chains existed.

The request row carries which stage is waiting (`stage`, from 0) and when it began
(`stage_at`); `approvers` and `approvals_required` are the waiting stage's, so every check that
reads them (`gate.decisions.acting.refusal_for`, the cards' "1 of 2") is about the stage whose turn
it is. Votes carry the stage they were cast in; a stage counts only its own.
`gate.decisions.machine` moves a request from one stage to the next (a compare-and-set, like every
transition).

Pure data and arithmetic: no SQL, no settings (policy resolves names before they get here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Protocol


class CastVote(Protocol):
    """What counting reads of a vote (the store's `VoteRow`, the read model's `VoteView`)."""

    @property
    def approver(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def via(self) -> str: ...
    @property
    def stage(self) -> int: ...


@dataclass(frozen=True)
class VoteFilter:
    """Which votes a stage counts. Empty means no restriction.

    `counted` holds the names the rule's `votes.groups` resolved to; `via` the surfaces. The
    sign-in method (password, proxy, OIDC with MFA) is the next filter: it belongs here as
    one more field, matched in `counts` against a `method` the vote would carry (and
    `gate.decisions.acting.refusal_for` against the actor's), once the OIDC work records it."""

    counted: tuple[str, ...] | None = None
    via: tuple[str, ...] = ()

    def counts(self, approver: str, via: str) -> bool:
        """Whether a vote by `approver` cast from `via` counts."""
        if self.counted is not None and approver not in self.counted:
            return False
        return not self.via or via in self.via


@dataclass(frozen=True)
class Stage:
    """One step of a chain, as frozen onto a request (names resolved)."""

    name: str
    #: who decides it: the primary approvers, or the fallback when those were nobody
    approvers: tuple[str, ...] = ()
    #: True when `approvers` are the fallback approvers
    fallback: bool = False
    approvals: int = 1
    rejections: int = 1
    filter: VoteFilter = field(default_factory=VoteFilter)
    escalate_approvers: tuple[str, ...] = ()
    escalate_after: timedelta | None = None
    #: the stage denies by itself after this (from when it began)
    timeout: timedelta | None = None
    #: approvers must write why they approve
    justify: bool = False
    #: the primary and fallback entries as written (names or group:x), for explanations
    asked: tuple[str, ...] = ()
    fallback_asked: tuple[str, ...] = ()

    def label(self, index: int, total: int) -> str:
        """ "stage 2 of 3 (finance)"."""
        return f"stage {index + 1} of {total}" + (f" ({self.name})" if self.name else "")

    def to_json(self) -> dict[str, Any]:
        """What is frozen onto a request (`Offers.to_options`)."""

        def seconds(d: timedelta | None) -> float | None:
            return d.total_seconds() if d is not None else None

        counted = self.filter.counted
        return {
            "name": self.name,
            "approvers": list(self.approvers),
            "fallback": self.fallback,
            "approvals": self.approvals,
            "rejections": self.rejections,
            "counted": list(counted) if counted is not None else None,
            "via": list(self.filter.via),
            "escalate_approvers": list(self.escalate_approvers),
            "escalate_after_seconds": seconds(self.escalate_after),
            "timeout_seconds": seconds(self.timeout),
            "justify": self.justify,
            "asked": list(self.asked),
            "fallback_asked": list(self.fallback_asked),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stage:
        """From what `to_json` wrote."""

        def span(key: str) -> timedelta | None:
            value = data.get(key)
            return timedelta(seconds=float(value)) if value is not None else None

        counted = data.get("counted")
        return cls(
            name=str(data.get("name") or ""),
            approvers=tuple(data.get("approvers") or ()),
            fallback=bool(data.get("fallback")),
            approvals=int(data.get("approvals") or 1),
            rejections=int(data.get("rejections") or 1),
            filter=VoteFilter(
                tuple(counted) if counted is not None else None, tuple(data.get("via") or ())
            ),
            escalate_approvers=tuple(data.get("escalate_approvers") or ()),
            escalate_after=span("escalate_after_seconds"),
            timeout=span("timeout_seconds"),
            justify=bool(data.get("justify")),
            asked=tuple(data.get("asked") or ()),
            fallback_asked=tuple(data.get("fallback_asked") or ()),
        )


@dataclass(frozen=True)
class Tally:
    """A stage's counted votes: approvals and rejections so far, against its thresholds."""

    approvals: int
    rejections: int
    stage: Stage

    @property
    def approved(self) -> bool:
        return self.approvals >= self.stage.approvals

    @property
    def rejected(self) -> bool:
        return self.rejections >= self.stage.rejections


def tally(stage: Stage, index: int, votes: Iterable[CastVote]) -> Tally:
    """Count the votes cast in stage `index` that its filter counts (one per person: a
    person's vote row is their newest verdict, changed in place)."""
    mine = [v for v in votes if v.stage == index and stage.filter.counts(v.approver, v.via)]
    return Tally(
        sum(v.verdict == "approve" for v in mine), sum(v.verdict == "reject" for v in mine), stage
    )


def approvers_of(stage: Stage, index: int, votes: Iterable[CastVote]) -> list[str]:
    """Who approved stage `index` (the votes it counts)."""
    return [
        v.approver
        for v in votes
        if v.stage == index and v.verdict == "approve" and stage.filter.counts(v.approver, v.via)
    ]


def implicit(approvals: int, rejections: int, vote_filter: VoteFilter, justify: bool) -> Stage:
    """The one stage of a rule without stages: its `approvals_required` and `votes`."""
    return Stage(
        name="", approvals=approvals, rejections=rejections, filter=vote_filter, justify=justify
    )


def staged(options: Mapping[str, Any]) -> bool:
    """Whether the request these options were frozen onto has explicit stages."""
    return bool(options.get("stages"))


def resolve(
    asked: Sequence[str],
    fallback: Sequence[str],
    expand: Any,
    is_requester: Any = None,
) -> tuple[tuple[str, ...], bool]:
    """(who decides, whether that is the fallback): `asked` expanded to names, without the
    requester when `is_requester` says so; the fallback's when that leaves nobody."""
    names = [n for n in expand(list(asked)) if is_requester is None or not is_requester(n)]
    if names or not fallback:
        return tuple(names), False
    return tuple(expand(list(fallback))), True


def for_requester(stages: Sequence[Stage], expand: Any, is_requester: Any) -> tuple[Stage, ...]:
    """`stages` for one request: a stage whose approvers are all the requester (who may not
    approve their own call) asks its fallback approvers instead."""
    out: list[Stage] = []
    for stage in stages:
        if stage.fallback or not stage.fallback_asked:
            out.append(stage)
            continue
        names, fell = resolve(stage.asked, stage.fallback_asked, expand, is_requester)
        out.append(replace(stage, approvers=names, fallback=fell) if fell else stage)
    return tuple(out)


def explain(stages: Sequence[Stage], justification: str, self_approvers: Any) -> dict[str, Any]:
    """Who decides a request and how, in words for `gate policy explain`: each stage (a rule
    without stages has one) with its approvers, thresholds, filter, escalation and deadline,
    then what the rule asks of the agent's justification and who may approve their own."""

    def span(d: timedelta | None) -> str | None:
        return None if d is None else f"{int(d.total_seconds())}s"

    said = []
    for index, stage in enumerate(stages):
        counted = stage.filter.counted
        said.append(
            {
                "stage": stage.label(index, len(stages)),
                "approvers": list(stage.approvers) or "any approver",
                "fallback": stage.fallback,
                "approvals_needed": stage.approvals,
                "rejections_needed": stage.rejections,
                "votes_count_from": {
                    "people": list(counted) if counted is not None else "anyone who may decide",
                    "surfaces": list(stage.filter.via) or "any",
                },
                "escalate_after": span(stage.escalate_after),
                "escalate_to": list(stage.escalate_approvers),
                "denies_after": span(stage.timeout),
                "approvers_justify": stage.justify,
            }
        )
    return {
        "stages": said,
        "justification": justification,
        "self_approval": list(self_approvers) if self_approvers is not None else "refused",
    }
