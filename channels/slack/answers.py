"""What the person who clicked is told, rendered from what gate's pipeline returned.

Nothing here decides anything: the words come from `Result.message()` and the refusal from
`Result.refusal`. What is Slack's own is where an answer goes: a private message in the
channel, nothing (the refreshed card is the answer everybody sees), or errors shown under
a modal's inputs, which keep the modal open.
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import Response
from fastapi.responses import JSONResponse

from channels.slack.modals import REASON_BLOCK
from channels.slack.mrkdwn import cut, escape
from gate.base.statuses import RequestStatus
from gate.decisions.acting import Refusal, Result
from gate.decisions.outcomes import AlreadyFinal, AlreadyVoted, Voted

#: Slack shows a modal field's error in a line under the input; longer text is cut
MAX_MODAL_ERROR = 150


def approve_answer(result: Result, *, retry: bool) -> str | None:
    """The private message for an Approve click or a grant pick; None: say nothing."""
    if result.refusal is Refusal.not_offered:  # a grant the rule no longer offers
        return result.message()
    if result.changed and not isinstance(result.outcome, Voted):
        return None  # the outbox refreshes the card, which is the answer everybody sees
    if retry and isinstance(result.outcome, AlreadyFinal | AlreadyVoted):
        return None  # Slack re-sent a click we already handled; the clicker was answered then
    return result.message()


def submission_answer(
    result: Result, asked: RequestStatus, *, retry: bool, offer_block: str, block: str
) -> Response:
    """The answer to a submitted modal that decided (or tried to) with `asked` as outcome.

    An empty 200 closes the modal (the outbox refreshes the card); an error stays in the
    modal: under `offer_block` when the rule does not offer what was asked, else under
    `block`. A retried delivery of a submission whose decision is already recorded closes
    the modal too: its first delivery answered.
    """
    out = result.outcome
    if result.refusal is Refusal.not_offered:
        return modal_error(result.detail or result.message(), offer_block)
    repeat = retry and isinstance(out, AlreadyFinal) and out.status == asked
    if result.changed or repeat:
        return Response(status_code=200)
    return modal_error(result.message(), block)


def modal_error(message: str, block: str = REASON_BLOCK) -> Response:
    """One error, shown under the named input; the modal stays open so the approver sees why."""
    return modal_errors({block: message})


def modal_errors(errors: Mapping[str, str]) -> Response:
    """Errors by input block id (`response_action: errors`)."""
    body = {
        "response_action": "errors",
        "errors": {block: cut(escape(text), MAX_MODAL_ERROR) for block, text in errors.items()},
    }
    return JSONResponse(body)


def ephemeral_text(text: str) -> str:
    """A private answer's text: gate's words can quote untrusted text, so mrkdwn is escaped."""
    return escape(text)
