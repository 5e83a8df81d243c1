"""What a rule offers approvers beyond a bare yes or no, and the checks before a decision counts.

`Offers` is compiled by policy from a `[[rules]]` entry and frozen onto each request (as
JSON in its `options` column), so editing gate.toml never changes what a waiting request
offers. Every surface reads the typed `RequestView.offers`; nobody reads option keys by
name. The checks here raise `InvalidInput` whose code says which offer was refused; the
decision pipeline turns that into `Refusal.not_offered`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gate.asking.binding import argument_diff
from gate.base.errors import InvalidInput
from gate.base.statuses import Verdict
from gate.policy.stages import Stage, VoteFilter, implicit

#: the longest grant when a rule offers grants but sets no `max_grant`
DEFAULT_MAX_GRANT = timedelta(hours=1)


@dataclass(frozen=True)
class StepUp:
    """A rule's demand for a strong approval (RFC 9470): a single sign-on whose `auth_time`
    is at most `max_age` old when the vote is cast, with one of `acr` when any are named
    (`max_age` None: none demanded), and with `webauthn`, a passkey's assertion over the
    request and its arguments (`gate.identity.passkeys`)."""

    max_age: timedelta | None
    acr: tuple[str, ...] = ()
    webauthn: bool = False

    @classmethod
    def from_json(cls, value: Any) -> StepUp | None:
        """From the request's options. A value that is there but unreadable still demands a
        step-up, at its strictest (no age is fresh enough, and a passkey): never none (fail
        closed)."""
        if value is None:
            return None
        strictest = cls(timedelta(0), webauthn=True)
        if not isinstance(value, Mapping):
            return strictest
        seconds, acr = value.get("max_age_seconds"), value.get("acr") or []
        webauthn = value.get("webauthn", False)
        if not isinstance(acr, list) or not isinstance(webauthn, bool):
            return strictest
        if seconds is None and webauthn:
            return cls(None, (), webauthn=True)
        if not isinstance(seconds, int | float) or isinstance(seconds, bool):
            return strictest
        return cls(timedelta(seconds=float(seconds)), tuple(str(a) for a in acr), webauthn)

    def to_json(self) -> dict[str, Any]:
        """The JSON frozen on a request made under the rule (`webauthn` only when demanded,
        so requests from before it read the same)."""
        seconds = None if self.max_age is None else self.max_age.total_seconds()
        data: dict[str, Any] = {"max_age_seconds": seconds, "acr": list(self.acr)}
        if self.webauthn:
            data["webauthn"] = True
        return data


@dataclass(frozen=True)
class Offers:
    """What approvers of one request may do besides approve or reject as asked."""

    #: approve with edited arguments (never on rules that need more than one approval)
    allow_edits: bool = True
    #: the arguments an approver may change (None: any of them)
    editable: tuple[str, ...] | None = None
    #: grant scopes on offer: "call", "pattern", "session", "agent"
    grant_scopes: tuple[str, ...] = ()
    max_grant: timedelta = DEFAULT_MAX_GRANT
    #: the arguments a "pattern" grant always pins to their approved values
    grant_pin: tuple[str, ...] = ()
    #: the most calls one grant may let through (None: no count, only time)
    max_grant_uses: int | None = None
    reject_reasons: tuple[str, ...] = ()
    remind_after: timedelta | None = None
    escalate_after: timedelta | None = None
    #: extra "channel:target" cards when the request escalates
    escalate_to: tuple[str, ...] = ()
    #: approvers (names or "group:x") added when the request escalates
    escalate_approvers: tuple[str, ...] = field(default_factory=tuple)
    #: the top-level arguments the rule's `when` reads (`args.amount` -> "amount"): every
    #: surface marks them, so an approver sees what made the rule fire
    watched_args: tuple[str, ...] = ()
    #: set when the rule's `when` failed on this call and gate asked to be safe: what failed,
    #: in words every surface shows beside the call
    condition_error: str | None = None
    #: set when the call was asked because its agent tripped (`gate.decisions.denials`): the words
    #: every surface shows ("agent 'x' tripped: 3 rejections in a row; ...")
    tripped: str | None = None
    #: the chain's stages, decided in order (empty: one implicit stage, the fields below)
    stages: tuple[Stage, ...] = ()
    #: rejections that reject (a rule without stages; a stage has its own)
    rejections: int = 1
    #: which votes count (a rule without stages)
    vote_filter: VoteFilter = field(default_factory=VoteFilter)
    #: approvers must write why they approve (a rule without stages)
    approvers_justify: bool = False
    #: the agent's justification: "optional", "required" (422 without) or "to_review" (a
    #: request without one can be rejected, never approved)
    justification: str = "optional"
    #: who may approve a call they asked for themselves, with a reason (None: nobody)
    self_approvers: tuple[str, ...] | None = None

    def stage(self, index: int, approvals_required: int) -> Stage:
        """The stage at `index` (the implicit one of a rule without stages)."""
        if self.stages:
            return self.stages[min(index, len(self.stages) - 1)]
        return implicit(
            approvals_required, self.rejections, self.vote_filter, self.approvers_justify
        )

    #: the approver groups the rule names (`group:finance` -> "finance"): a person whose
    #: identity provider puts them in one may decide too (`[oidc] group_map`)
    approver_groups: tuple[str, ...] = ()
    #: an approval counts only from a fresh single sign-on (`gate.policy.stepup`); None: any
    step_up: StepUp | None = None
    #: chat clicks by a person bound only by their email address are refused
    refuse_email_bound: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Offers:
        """From the JSON frozen on a request (older rows may lack keys: defaults apply)."""

        def span(key: str) -> timedelta | None:
            value = options.get(key)
            return timedelta(seconds=float(value)) if value is not None else None

        editable = options.get("editable")
        counted, selves = options.get("counted"), options.get("self_approvers")
        return cls(
            allow_edits=bool(options.get("allow_edits", True)),
            editable=tuple(editable) if editable is not None else None,
            grant_scopes=tuple(options.get("grant_scopes") or ()),
            max_grant=span("max_grant_seconds") or DEFAULT_MAX_GRANT,
            grant_pin=tuple(options.get("grant_pin") or ()),
            max_grant_uses=options.get("max_grant_uses"),
            reject_reasons=tuple(options.get("reject_reasons") or ()),
            remind_after=span("remind_after_seconds"),
            escalate_after=span("escalate_after_seconds"),
            escalate_to=tuple(options.get("escalate_to") or ()),
            escalate_approvers=tuple(options.get("escalate_approvers") or ()),
            watched_args=tuple(options.get("watched_args") or ()),
            condition_error=options.get("condition_error") or None,
            tripped=options.get("tripped") or None,
            stages=tuple(Stage.from_json(s) for s in options.get("stages") or ()),
            rejections=int(options.get("rejections") or 1),
            vote_filter=VoteFilter(
                tuple(counted) if counted is not None else None, tuple(options.get("via") or ())
            ),
            approvers_justify=bool(options.get("approvers_justify")),
            justification=str(options.get("justification") or "optional"),
            self_approvers=tuple(selves) if selves is not None else None,
            approver_groups=tuple(options.get("approver_groups") or ()),
            step_up=StepUp.from_json(options.get("step_up")),
            refuse_email_bound=bool(options.get("refuse_email_bound")),
        )

    def next_nudge(
        self, created_at: datetime, *, reminded: bool, escalated: bool, stage: int = 0
    ) -> datetime | None:
        """When the reminder job next has something to do for a request made (or whose
        chain `stage` began) at `created_at`: the earlier of its reminder and its escalation
        not done yet (None: nothing left). Stored on the request (`nudge_at`), so each tick
        reads only what is due.
        """
        escalate_after = self.escalate_after_in(stage)
        due = [
            created_at + after
            for after, done in ((self.remind_after, reminded), (escalate_after, escalated))
            if after is not None and not done
        ]
        return min(due, default=None)

    def escalate_after_in(self, stage: int) -> timedelta | None:
        """How long stage `stage` waits before it escalates (the rule's, without stages)."""
        return self.stages[stage].escalate_after if self.stages else self.escalate_after

    def escalate_approvers_in(self, stage: int) -> tuple[str, ...]:
        """Who is added when stage `stage` escalates (the rule's, without stages)."""
        return self.stages[stage].escalate_approvers if self.stages else self.escalate_approvers

    def to_options(self) -> dict[str, Any]:
        """The JSON stored on a request made under the rule."""

        def seconds(d: timedelta | None) -> float | None:
            return d.total_seconds() if d is not None else None

        added: dict[str, Any] = {}  # keys newer than 0014 are stored only when set
        if self.approver_groups:
            added["approver_groups"] = list(self.approver_groups)
        if self.step_up is not None:
            added["step_up"] = self.step_up.to_json()
        if self.grant_pin:
            added["grant_pin"] = list(self.grant_pin)
        if self.max_grant_uses is not None:
            added["max_grant_uses"] = self.max_grant_uses
        if self.refuse_email_bound:
            added["refuse_email_bound"] = True
        return added | {
            "allow_edits": self.allow_edits,
            "editable": list(self.editable) if self.editable is not None else None,
            "grant_scopes": list(self.grant_scopes),
            "max_grant_seconds": seconds(self.max_grant),
            "reject_reasons": list(self.reject_reasons),
            "remind_after_seconds": seconds(self.remind_after),
            "escalate_after_seconds": seconds(self.escalate_after),
            "escalate_to": list(self.escalate_to),
            "escalate_approvers": list(self.escalate_approvers),
            "watched_args": list(self.watched_args),
            "condition_error": self.condition_error,
            "tripped": self.tripped,
            **self._chain_options(),
        }

    def _chain_options(self) -> dict[str, Any]:
        """The chain's part of `to_options`: written only when it differs from a plain
        rule's, so the options of a rule without chains stay as they were."""
        out: dict[str, Any] = {}
        if self.stages:
            out["stages"] = [s.to_json() for s in self.stages]
        if self.rejections != 1:
            out["rejections"] = self.rejections
        if self.vote_filter.counted is not None:
            out["counted"] = list(self.vote_filter.counted)
        if self.vote_filter.via:
            out["via"] = list(self.vote_filter.via)
        if self.approvers_justify:
            out["approvers_justify"] = True
        if self.justification != "optional":
            out["justification"] = self.justification
        if self.self_approvers is not None:
            out["self_approvers"] = list(self.self_approvers)
        return out


#: what a reject without a reason is answered, wherever it was made
REASON_REQUIRED = "say why you reject it: the reason is what the agent is told"


def with_reasons(
    offers: Offers, verdict: Verdict, comment: str | None, reasons: list[str]
) -> str | None:
    """Combine preset reject reasons and free text into what the model is told.

    A reject needs one or the other, on every surface (the console, chat, email, the API,
    `gate requests reject`): the reason is what the agent is told, so it can do something
    else instead of trying the same call again. This is the one place that rule lives;
    forms check it early only to keep their own wording.
    """
    if verdict == Verdict.reject and not reasons and not (comment or "").strip():
        raise InvalidInput(REASON_REQUIRED, code="reason_required")
    if not reasons:
        return comment
    if verdict != Verdict.reject:
        raise InvalidInput("preset reasons go with a reject", code="invalid_input")
    offered = list(offers.reject_reasons)
    unknown = [r for r in reasons if r not in offered]
    if unknown:
        raise InvalidInput(
            f"not one of this rule's reject reasons: {unknown} (offered: {offered})",
            code="unknown_reason",
        )
    text = "; ".join(reasons)
    return f"{text} - {comment}" if comment else text


def check_edits(
    offers: Offers, verdict: Verdict, asked: dict[str, Any], edited_args: dict[str, Any]
) -> None:
    """Refuse edits that do not go with an approval, or that the rule forbids."""
    if verdict != Verdict.approve:
        raise InvalidInput("edited arguments go with an approval", code="invalid_input")
    if not offers.allow_edits:
        raise InvalidInput(
            "this rule does not allow approving with edits "
            "(it forbids them, or it needs more than one approver)",
            code="edits_not_allowed",
        )
    if offers.editable is not None:
        # The rule names what may change; every surface (API, web, chat) is held to it.
        changed = sorted(argument_diff(asked, edited_args))
        forbidden = [key for key in changed if key not in offers.editable]
        if forbidden:
            raise InvalidInput(
                f"this rule lets approvers change only {sorted(offers.editable)}; "
                f"these may not change: {forbidden}",
                code="edit_not_offered",
            )


#: what an approval without a comment is answered when the stage asks approvers to justify
COMMENT_REQUIRED = "say why you approve it: this stage asks approvers to justify their approval"
#: ... when a person approves a call they asked for themselves (a rule allows it, with a reason)
SELF_APPROVAL_REASON = (
    "say why you approve a call you asked for yourself: the rule allows it only with a reason"
)


def require_justification(offers: Offers, rule: str, justification: str | None) -> None:
    """A 422 naming the field when the rule requires the agent's justification and the call
    came without one (`gate hook` then tells the model to retry with one)."""
    if offers.justification != "required" or (justification or "").strip():
        return
    why = (
        f"rule {rule!r} needs the agent to say why this call is needed: send a `justification` "
        "(what the call is for and who asked for it)"
    )
    raise InvalidInput(
        f"justification: {why}",
        code="justification_required",
        problems=[{"field": "justification", "message": why}],
    )


def check_comment(stage: Stage, verdict: Verdict, comment: str | None, *, own: bool) -> None:
    """Refuse an approval without a comment where one is asked for: the stage asks its
    approvers to justify, or the person approves their own call (`own`)."""
    if verdict != Verdict.approve or (comment or "").strip():
        return
    if own:
        raise InvalidInput(SELF_APPROVAL_REASON, code="reason_required")
    if stage.justify:
        raise InvalidInput(COMMENT_REQUIRED, code="comment_required")
