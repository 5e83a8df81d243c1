"""What a chat card offers beyond yes/no, for every chat channel: the call it shows (gate's
rendering, never the agent's summary, which is shown apart as the agent's claim) and whether
it may offer to approve it, the fields an approver may edit, the grants a rule
offers (`channels.grant_offers`), its preset reject reasons, the countdown, and who may act.

Pure functions over a `RequestView`; each channel renders them in its own card language and
reads them back from its own callback shape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple

from channels.grant_offers import (  # re-exported: every channel reads them from here
    GRANT_DEFAULT_SECONDS as GRANT_DEFAULT_SECONDS,
)
from channels.grant_offers import SCOPE_WORDS as SCOPE_WORDS
from channels.grant_offers import GrantChoice as GrantChoice
from channels.grant_offers import grant_choices as grant_choices
from channels.grant_offers import parse_grant as parse_grant
from gate.config.settings import Settings
from gate.decisions.acting import Result
from gate.decisions.outcomes import Extended
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, Click, LinkAnswer
from gate.policy.stepup import CARD_NOTE as STEP_UP_NOTE
from gate.rendering import CallRendering, as_text, render_call, shown_chars
from gate.text.untrusted import clean, masks_only_credentials

log = logging.getLogger("gate.channels")

#: what one "Extend" click adds to the deadline
EXTEND_BY = "15m"
EXTEND_LABEL = "Extend +15m"
#: the button that says "I'm on it" without deciding (`gate.decisions.acknowledging`)
ACKNOWLEDGE_LABEL = "I'm on it"
#: a card's headline for each status, the same words on every platform
TITLES = {
    "pending": "Approval needed",
    "approved": "Approved",
    "rejected": "Rejected",
    "expired": "Expired",
    "cancelled": "Cancelled",
}


# -- the call, as gate renders it, and whether the card may offer to approve it --------------

#: how a card labels the agent's summary: the agent's words, shown below gate's rendering of
#: the call, never as the card's headline
CLAIM_LABEL = "Agent's summary (the agent's claim, not checked by gate)"
#: the same, where a platform has no room for the whole label (WeCom's 5-character keys)
CLAIM_SHORT = "Claim"


@dataclass(frozen=True)
class Arguments:
    """A call as a card with room for so many characters shows it: gate's rendering as text
    (`gate.rendering.as_text`), whole or `cut`, in which case the text itself ends by saying
    how many lines and characters are not shown and where the whole call is (never a silent
    cut). `whole` says the card shows the call whole and so may offer to approve it; one that
    does not says why (`note`). `headline` is gate's one line about the call, for the card's
    title (never the agent's summary)."""

    text: str
    whole: bool
    cut: bool = False
    headline: str = ""
    #: the rule demands a step-up (`RequestView.approvable_in_chat`): no card approves it
    step_up: bool = False

    def note(self, platform: str) -> str:
        """What a card that does not offer to approve says instead: the rule needs a fresh
        single sign-on (`gate.policy.stepup`), the call was too long for it, or it fit but a mask in
        it could hide code (`gate.text.untrusted.masks_only_credentials`)."""
        if self.step_up:
            return STEP_UP_NOTE
        return too_long(platform) if self.cut else masked_code(platform)


def render(view: RequestView, args: Mapping[str, Any] | None = None) -> CallRendering:
    """The call of `view` as gate renders it, the arguments its rule's condition reads marked
    (`args`: other arguments of the same call, such as the edited ones that ran)."""
    chosen = view.tool_args if args is None else args
    return render_call(view.tool_name, chosen, watched=view.offers.watched_args)


def arguments(
    view: RequestView,
    limit: int,
    *,
    link: bool = True,
    args: Mapping[str, Any] | None = None,
) -> Arguments:
    """The call a card with room for `limit` characters shows: `as_text` of gate's rendering,
    the text gate's check on an approval measures (`gate.rendering.shown_chars`), so the two
    cannot disagree. Cut, it ends saying what is not shown and (with `link`) the request's
    page; a platform whose card is itself the link passes `link=False`. `args` renders other
    arguments of the call (the edited ones that ran, once final)."""
    rendering = render(view, args)
    url = (view.url or None) if link else None
    shown = as_text(rendering, limit=limit, url=url)
    step_up = not view.approvable_in_chat
    if not (shown.hidden_lines or shown.hidden_chars):
        # It fits: whole, unless a mask in it could hide code (`CallRendering.whole`), or
        # the rule takes approvals only from the console (`whole` is what offers them).
        chosen = view.tool_args if args is None else args
        whole = shown.whole and masks_only_credentials(chosen) and not step_up
        return Arguments(shown.text, whole, headline=rendering.headline, step_up=step_up)
    cut = shown.text[:limit]
    return Arguments(cut, False, cut=True, headline=rendering.headline, step_up=step_up)


def arguments_within(
    view: RequestView,
    limit: int,
    room: int,
    measure: Callable[[str], int],
    *,
    link: bool = True,
) -> Arguments:
    """`arguments(view, limit)`, and when cut, cut shorter until the card's form of the text
    (`measure`: escaped, in a block) is at most `room`: the words saying what is not shown
    stay whole and true, where cutting the escaped text would cut them off. A whole call
    stays whole (the card offers to approve it and makes room for it)."""
    shown = arguments(view, limit, link=link)
    for _ in range(6):
        size = measure(shown.text)
        if not shown.cut or size <= room or limit <= 0:
            return shown
        limit = max(0, min(limit - 1, limit * room // max(size, 1) - 1))
        shown = arguments(view, limit, link=link)
    # Markup that lengthens each character at most sixfold (`&` is `&amp;`, and more)
    return shown if measure(shown.text) <= room else arguments(view, room // 6, link=link)


def recut(view: RequestView, shown: Arguments, room: int, full: int) -> Arguments:
    """`shown` for a card shrunk to fit its platform: a cut call cut again to `room` characters
    (the card links the whole call itself) when `room` is less than the card's `full` room."""
    return arguments(view, room, link=False) if shown.cut and room < full else shown


def approvable(view: RequestView, limit: int) -> bool:
    """Whether a card with room for `limit` characters offers approve, edit and approve, or
    approve with a grant: while pending, and only when it shows the whole rendered call (and
    no mask in it could hide code), as gate's check on the approval (`gate.decisions.acting`)
    measures."""
    if view.status != "pending" or not masks_only_credentials(view.tool_args):
        return False
    if not view.approvable_in_chat:
        return False
    watched = view.offers.watched_args
    return shown_chars(view.tool_name, view.tool_args, watched=watched) <= limit


def too_long(platform: str) -> str:
    """What a card says instead of offering to approve a call it had to cut."""
    return f"The call is too long for {platform}: review and approve in gate."


def masked_code(platform: str) -> str:
    """What a card says instead of offering to approve a call that fits but is masked beyond
    one credential token (`gate.text.untrusted.masks`): the request page reveals it (an approval
    counts only once revealed), the API shows it raw."""
    return (
        f"Part of the call is masked on {platform}: a value under a secret-named key, or text "
        "where a mask could hide code. Reveal it on the request page in gate (or read it raw "
        "with `gate requests show`) and approve there."
    )


def headline(view: RequestView, shown: Arguments | None = None) -> str:
    """gate's one line about the call, for a card's title and notification (the agent's
    summary never stands in for it); from `shown` when the card has it at hand."""
    return (shown.headline if shown is not None else render(view).headline) or clean(view.tool_name)


def claim(view: RequestView) -> str | None:
    """The agent's summary and justification, cleaned, or None when it sent neither (a card
    then shows nothing in their place, never a dash). Cards show it after the call,
    labelled `CLAIM_LABEL`: both are the agent's words, not checked by gate."""
    said = [clean(view.summary) if view.summary and view.summary.strip() else ""]
    if view.justification and view.justification.strip():
        said.append(f"{JUSTIFICATION_LABEL}: {clean(view.justification)}")
    return "\n".join(part for part in said if part) or None


#: how a card introduces the agent's justification, inside its claim
JUSTIFICATION_LABEL = "Justification"


#: how much of the rule-and-stage line a card shows (a chain of five stages, named)
STAGE_CHARS = 400


def rule_and_stage(view: RequestView) -> str | None:
    """The rule's name, and in a chain (`gate.policy.stages`) which stage decides now and who
    approved the ones before: "payments; waiting for stage 2 of 3 (finance); stage 1 of 3
    (team lead): approved by carol". Gate's words (the names come from gate.toml)."""
    label = view.stage_label
    if label is None:
        return view.rule
    now = f"waiting for {label}" if not view.is_final else f"{label}: {view.status}"
    return "; ".join([view.rule or "-", now, *view.decided_stages])


#: what a card says when the rule's condition failed on the call (`Offers.condition_error`)
CONDITION_FAILED = "The rule's condition failed on this call, so gate asked a person to be safe."


def condition_failed(view: RequestView) -> str | None:
    """What failed in the rule's condition, cleaned (the words may quote the call), or None
    when it did not fail. Cards show `CONDITION_FAILED`, then these words as untrusted text."""
    error = view.offers.condition_error
    return (clean(error) or "the condition failed") if error else None


#: what a card says when the call was asked because its agent tripped (`Offers.tripped`)
AGENT_TRIPPED = (
    "People rejected this agent's calls again and again, so gate asks about every call it "
    "makes until a person resets it (the console's Agents page, or gate agents reset)."
)


class CardWarning(NamedTuple):
    """The warning a card shows above the call: a short `title` ("Condition failed"), gate's
    `heading` sentence, then `words` (untrusted text, cleaned: they may quote the call)."""

    title: str
    heading: str
    words: str


def why_asked(view: RequestView) -> CardWarning | None:
    """Why gate asked beyond the rule itself, for a card: the rule's condition failed on the
    call (`CONDITION_FAILED`), or the agent tripped (`AGENT_TRIPPED`); None otherwise."""
    failed = condition_failed(view)
    tripped = clean(view.offers.tripped) if view.offers.tripped else None
    if failed:
        words = f"{failed}; {tripped}" if tripped else failed
        return CardWarning("Condition failed", CONDITION_FAILED, words)
    if tripped:
        return CardWarning("Agent tripped", AGENT_TRIPPED, tripped)
    return None


class Showing:
    """A channel's `ChannelContext` that tells gate, on every click, how many characters of a
    call's rendering the channel's cards show (`Click.args_chars`). gate refuses an approval from a
    card that cut the call; a channel that does not wrap its context approves nothing."""

    def __init__(self, ctx: ChannelContext, args_chars: int, platform: str) -> None:
        self._ctx = ctx
        self.args_chars = args_chars
        #: the platform's name in the card's words ("too long for Slack")
        self.platform = platform

    @property
    def settings(self) -> Settings:
        """The server's settings."""
        return self._ctx.settings

    async def act(self, click: Click) -> Result:
        """The click through gate's pipeline, saying what this channel's cards show."""
        return await self._ctx.act(replace(click, args_chars=self.args_chars))

    async def view(self, request_id: str) -> RequestView | None:
        """The current state of a request."""
        return await self._ctx.view(request_id)

    async def link(
        self, channel: str, user_id: str, code: str, *, exposed: bool = False
    ) -> LinkAnswer:
        """Bind the sender's platform id with a console's one-time code."""
        return await self._ctx.link(channel, user_id, code, exposed=exposed)


# -- who may act ------------------------------------------------------------------------------


async def refusal(
    ctx: ChannelContext,
    channel: str,
    request_id: str,
    user_id: str,
    *,
    approving: bool = False,
) -> tuple[str | None, RequestView | None]:
    """Why this platform user cannot act on the request now (None if they may), and its view.

    Asked before a channel opens a form (a reason, edits, a grant); gate's pipeline answers,
    and checks again when the form is submitted. A form that approves (`approving`: edit
    and approve, approve with a grant) does not open from a card that had to cut the call:
    the answer is the card's own words (`Arguments.note`), as a crafted click could ask for a
    form the card never offered. A context that does not say what its cards show (no `Showing`)
    shows nothing whole.
    """
    result = await ctx.act(Click(channel, user_id, request_id, "check"))
    if result.refusal is not None or result.outcome is not None:
        return result.message(), result.view
    view = result.view
    if approving and view is not None:
        shown = ctx if isinstance(ctx, Showing) else None
        card = arguments(view, shown.args_chars if shown else 0)
        if not card.whole:
            return card.note(shown.platform if shown else "this channel"), view
    return None, view


def extend_message(result: Result, now: datetime) -> str:
    """What the person who pressed Extend is told."""
    if isinstance(result.outcome, Extended):
        until = result.outcome.until
        return f"Deadline moved to {until:%Y-%m-%d %H:%M} UTC ({countdown(until, now)})."
    return result.message()


# -- the countdown ----------------------------------------------------------------------------


def countdown(deadline: datetime, now: datetime) -> str:
    """ "expires in 9 min": the time left, as of rendering (cards refresh on reminders)."""
    left = int((deadline - now).total_seconds())
    if left <= 0:
        return "deadline passed"
    if left < 60:
        return "expires in under a minute"
    minutes = (left + 59) // 60  # round up: "in 1 min" until the last minute is over
    if minutes < 90:
        return f"expires in {minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"expires in {hours} h {minutes} min" if minutes else f"expires in {hours} h"
    days, hours = divmod(hours, 24)
    return f"expires in {days} d {hours} h" if hours else f"expires in {days} d"


# -- preset reject reasons --------------------------------------------------------------------


def reject_reasons(view: RequestView) -> list[str]:
    """The rule's preset reject reasons (offered as options whose values are `r<index>`)."""
    return list(view.offers.reject_reasons)


def reasons_from(view: RequestView, values: list[str]) -> list[str]:
    """The preset reasons behind the option values an approver picked."""
    offered = reject_reasons(view)
    picked = []
    for value in values:
        index = value[1:]
        # isascii: isdigit() alone accepts "²", which int() refuses.
        if not (value.startswith("r") and index.isascii() and index.isdigit()):
            raise ValueError(f"not one of this rule's reasons: {value[:40]!r}")
        if int(index) >= len(offered):
            raise ValueError(f"not one of this rule's reasons: {value[:40]!r}")
        picked.append(offered[int(index)])
    return list(dict.fromkeys(picked))


# -- a decision that lands after the platform was answered ------------------------------------

#: what a presser is told when the decision behind "Recording..." failed outright
NOT_CONFIRMED = (
    "Your decision may not have been recorded: check the card, and try again if it still asks."
)


def counted(result: Result) -> bool:
    """Whether a click's decision counted: recorded, and it changed the request."""
    return result.refusal is None and result.view is not None and result.changed


async def late_words(decided: Awaitable[Result], channel: str) -> str | None:
    """What to tell a presser once the decision behind a "Recording..." answer lands: None
    when it counted (the card the outbox refreshes says so), else gate's words (a refusal,
    someone decided first), or `NOT_CONFIRMED` when deciding failed. Without it they would
    believe a click that did not count had."""
    try:
        result = await decided
    except Exception:
        log.exception("%s decision failed after its answer", channel)
        return NOT_CONFIRMED
    if counted(result):
        return None
    if result.refusal is not None:
        log.info("%s click refused after its answer: %s", channel, result.refusal.value)
    return result.message()
