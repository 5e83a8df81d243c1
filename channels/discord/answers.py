"""The interaction responses gate sends back to Discord, rendered from what gate's pipeline
returned.

Nothing here decides anything: the words come from `Result.message()` and its refusal. What is
Discord's own is the shape of the answer: an ephemeral message (flag 64) only the clicker sees,
UPDATE_MESSAGE (7) that replaces the clicked card for everybody, DEFERRED_UPDATE_MESSAGE (6)
when the card is refreshed later by the outbox, or a MODAL (9).
"""

from __future__ import annotations

from typing import Any

import anyio

from channels.discord.card import NO_MENTIONS, card_message
from channels.discord.interaction import Interaction
from channels.discord.markdown import MAX_CONTENT, cut, escape
from gate.decisions.acting import Result
from gate.decisions.outcomes import Voted
from gate.text.untrusted import clean

PONG, CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE, AUTOCOMPLETE_RESULT, MODAL = (
    1, 4, 6, 7, 8, 9
)  # fmt: skip
EPHEMERAL = 1 << 6
RECORDING = "Recording your decision; the card updates in a moment."
BUSY = "gate is busy; try again in a moment."


def ephemeral(text: str, link: str | None = None) -> dict[str, Any]:
    """A message only the clicker sees; gate's words can quote untrusted text (a value that
    did not parse), so they are cleaned and escaped. `link` is gate's own URL, added as is
    (so it stays clickable)."""
    content = escape(clean(text)) + (f" {link}" if link else "")
    data = {
        "content": cut(content, MAX_CONTENT),
        "flags": EPHEMERAL,
        "allowed_mentions": NO_MENTIONS,
    }
    return {"type": CHANNEL_MESSAGE, "data": data}


def modal(body: dict[str, Any]) -> dict[str, Any]:
    """Open a modal."""
    return {"type": MODAL, "data": body}


def deferred_update() -> dict[str, Any]:
    """Acknowledge a click on a card; the outbox edits the card when the decision lands."""
    return {"type": DEFERRED_UPDATE}


async def decided(it: Interaction, result: Result) -> dict[str, Any]:
    """The answer to a click that decided, or tried to: the new card, or a private message.

    A recorded decision replaces the clicked card at once (UPDATE_MESSAGE, rendered in a
    worker thread); the outbox refreshes every other card of the request. A vote short of the
    quorum, a refusal, or a request already decided is told to the clicker alone.
    """
    final = result.changed and not isinstance(result.outcome, Voted)
    if final and result.view is not None and it.on_its_card:
        view = result.view
        message = await anyio.to_thread.run_sync(lambda: card_message(view))
        return {"type": UPDATE_MESSAGE, "data": message}
    if final and it.message_id is not None:
        return deferred_update()
    return ephemeral(result.message())


def late(it: Interaction) -> dict[str, Any]:
    """The answer when gate could not finish inside Discord's 3 seconds (the work goes on).

    A decision still lands and the outbox edits the card: DEFERRED_UPDATE_MESSAGE says so
    without a word. An Extend is told it is being recorded. A click that should have opened a
    modal cannot open it later (a modal is only ever the first answer): ask again.
    """
    verb = it.custom.verb if it.custom is not None else ""
    if verb in DECIDING and it.message_id is not None:
        return deferred_update()
    if verb in DECIDING or verb in ("extend", "acknowledge"):
        return ephemeral(RECORDING)
    return ephemeral(BUSY)


#: the controls whose click decides (the Approve button and the submitted modals)
DECIDING = ("approve", "rejectm", "editm", "grantm")
