"""What a Teams presser gets back: the `adaptiveCard/action` invoke response.

Teams shows the card an invoke answers with to the presser alone (the user-specific view),
so gate's answer to one person is that card with a notice on top: "Not recorded: ...",
"Deadline moved to ...". The words come from gate (`Result.message()`, its refusal); this
module picks the view (buttons or read-only) and renders it in a worker thread, since
rendering scans untrusted text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio

from channels.teams.api import CARD_TYPE
from channels.teams.card import SCHEMA, VERSION, clean, label, render_card, rich, run
from gate.decisions.acting import Refusal, Result
from gate.decisions.outcomes import AlreadyVoted, Voted
from gate.decisions.readmodel import RequestView

MESSAGE_TYPE = "application/vnd.microsoft.activity.message"
#: a late answer is gate's words, cut to a size well inside a message's 28 KB
LATE_CHARS = 1000


def message(text: str) -> dict[str, Any]:
    """An invoke response that shows one line of text (no card to show it on)."""
    return {"statusCode": 200, "type": MESSAGE_TYPE, "value": text}


async def card_answer(
    view: RequestView | None,
    user_ids: Sequence[str],
    *,
    actionable: bool,
    notice: str | None = None,
) -> dict[str, Any]:
    """The invoke response carrying the presser's own view of the card."""
    if view is None:
        return message(notice or "This request no longer exists.")
    card = await anyio.to_thread.run_sync(
        lambda: render_card(view, user_ids=user_ids, actionable=actionable, notice=notice)
    )
    return {"statusCode": 200, "type": CARD_TYPE, "value": card}


def may_still_act(result: Result) -> bool:
    """Whether the presser keeps the buttons after this answer.

    Not when gate said they may not act on the request at all, nor once their vote is in
    (a quorum waits for others); yes after a slip they can correct (a missing reason, a
    grant the rule does not offer) or an extension.
    """
    view = result.view
    if view is None or view.status != "pending":
        return False
    if result.refusal in (Refusal.not_an_approver, Refusal.self_approval):
        return False
    return not isinstance(result.outcome, Voted | AlreadyVoted)


def late_reply(text: str, name: str, member_id: str) -> dict[str, Any]:
    """What became of a press answered "Recording..." when it did not count: a message that
    @mentions the presser (a mention entity naming their Teams id, so Teams notifies them),
    and gate's words in a card's TextRun, which reads no markdown, with tag-shaped text
    defused. `name` is how gate knows the person, never the display name a press carries."""
    mention = f"<at>{label(name)}</at>"
    mentioned = {"id": member_id, "name": label(name)}
    card = {
        "type": "AdaptiveCard",
        "$schema": SCHEMA,
        "version": VERSION,
        "body": [rich(run(clean(text, LATE_CHARS, mask=False)), element_id="late_text")],
    }
    return {
        "type": "message",
        "text": mention,
        "entities": [{"type": "mention", "text": mention, "mentioned": mentioned}],
        "attachments": [{"contentType": CARD_TYPE, "content": card}],
    }
