"""Discord interactions turned into gate's neutral `Click`, and the answer sent back.

Each verified `Interaction` becomes one `gate.delivery.channel.Click` (edits by argument name, a
grant as (scope, duration), preset reasons as their text) and goes through `ChannelContext.act`,
gate's one decision pipeline, which says who may act and what the rule offers. Discord's own
parts stay here: opening a modal as the first answer (a reason, edits, a grant to confirm),
answering within Discord's 3 seconds whatever gate is doing, and acting on an Extend once per
interaction id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from channels import decisions, edits
from channels.discord import answers, ids
from channels.discord.card import editable
from channels.discord.interaction import Interaction
from channels.discord.markdown import MAX_REASON, plain
from channels.discord.modals import (
    NOTE_INPUT,
    REASON_INPUT,
    edit_modal,
    fields_by_input,
    grant_modal,
    reason_modal,
)
from channels.discord.verify import SIGNATURE_WINDOW_SECONDS
from channels.inbound import Once
from gate.asking.binding import argument_diff
from gate.base.statuses import utcnow
from gate.decisions.acting import Result
from gate.delivery.channel import Action, ChannelContext, Click, DeliveryError

log = logging.getLogger("gate.channels.discord")

#: Discord fails an interaction not answered within 3 s; leave room for the network
ANSWER_BUDGET_SECONDS = 2.5
#: Extend clicks remembered to tell a replayed body from a new click (far more than a team
#: makes in the five-minute window)
EXTEND_MEMORY = 10_000
NEED_A_REASON = "Say why, so the agent knows what to do instead."
Answer = dict[str, Any]
#: sends a follow-up message: (application id, interaction token, message body)
FollowUp = Callable[[str, str, dict[str, Any]], Awaitable[None]]


class Clicks:
    """Handles verified interactions for one Discord channel."""

    def __init__(
        self,
        name: str,
        gate: ChannelContext,
        *,
        clock: Callable[[], float],
        follow_up: FollowUp | None = None,
        budget: float = ANSWER_BUDGET_SECONDS,
    ) -> None:
        self.name = name
        self.gate = gate
        self.budget = budget
        self._follow_up = follow_up
        # Extend is the one click that is not idempotent (each adds time): a replayed body
        # of it must be recognised. Every other click decides, and the state machine refuses
        # a second decision anyway.
        self._extends: Once[Result] = Once(
            size=EXTEND_MEMORY, window=SIGNATURE_WINDOW_SECONDS, clock=clock
        )
        self._running: set[asyncio.Future[Any]] = set()

    async def handle(self, it: Interaction) -> Answer:
        """The answer to one interaction, within the budget whatever gate is doing."""
        if it.kind == "ping":
            return {"type": answers.PONG}
        if it.kind == "autocomplete":
            return {"type": answers.AUTOCOMPLETE_RESULT, "data": {"choices": []}}
        if it.kind == "command":
            return answers.ephemeral("gate has no commands; use the buttons on its cards.")
        work = self._track(self._route(it))
        try:
            return await asyncio.wait_for(asyncio.shield(work), self.budget)
        except TimeoutError:
            first = answers.late(it)  # the decision still lands; the outbox shows it
            self._track(self._tell_later(it, work, first))
            return first

    async def aclose(self) -> None:
        """Let work still in flight (past its answer) finish."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    def _track(self, work: Awaitable[Any]) -> asyncio.Future[Any]:
        future = asyncio.ensure_future(work)
        self._running.add(future)
        future.add_done_callback(self._finished)
        return future

    async def _tell_later(
        self, it: Interaction, work: asyncio.Future[Answer], first: Answer
    ) -> None:
        """Past the budget, a private answer the clicker should still read (a refusal, "Deadline
        moved") goes out as a follow-up message; the card itself is the outbox's."""
        try:
            answer = await work
        except Exception:
            log.exception("a Discord click failed after its first answer")
            return
        private = answer.get("type") == answers.CHANNEL_MESSAGE and answer != first
        if not private or self._follow_up is None or not (it.application_id and it.token):
            return
        try:
            await self._follow_up(it.application_id, it.token, answer["data"])
        except DeliveryError as exc:
            log.warning("follow-up to a Discord click failed: %s", exc)

    def _finished(self, work: asyncio.Future[Any]) -> None:
        self._running.discard(work)
        if not work.cancelled():
            work.exception()  # retrieved: a failure after the answer went out must not warn

    async def _route(self, it: Interaction) -> Answer:
        assert it.custom is not None
        route: dict[str, Callable[[Interaction], Awaitable[Answer]]] = {
            "approve": self._approve,
            "reject": self._ask_reason,
            "edit": self._ask_edits,
            "extend": self._extend,
            "acknowledge": self._acknowledge,
            "reasons": self._ask_reason,
            "grant": self._ask_grant,
            "rejectm": self._reject,
            "editm": self._edit,
            "grantm": self._grant,
        }
        return await route[it.custom.verb](it)

    def _click(self, it: Interaction, action: Action, **extra: Any) -> Click:
        return Click(self.name, it.user_id, it.request_id, action, **extra)

    def _note(self, it: Interaction, key: str) -> str | None:
        return it.inputs.get(key, "").strip()[:MAX_REASON] or None

    async def _approve(self, it: Interaction) -> Answer:
        return await answers.decided(it, await self.gate.act(self._click(it, "approve")))

    async def _acknowledge(self, it: Interaction) -> Answer:
        """ "I'm on it": told only to the clicker (a second one hears who was first)."""
        result = await self.gate.act(self._click(it, "acknowledge"))
        return answers.ephemeral(result.message())

    async def _extend(self, it: Interaction) -> Answer:
        """One click, one extension: a replayed body (same interaction id) shares the first's
        result, and the deadline the card showed makes a second replica's move a no-op."""
        assert it.custom is not None
        try:
            shown = ids.deadline_from(it.custom.args[0])
        except ValueError as exc:  # parse() refuses it first; never a 500 if it did not
            return answers.ephemeral(f"Not recorded: {exc}.")
        click = self._click(it, "extend", extend_by=decisions.EXTEND_BY, extend_from=shown)
        result, _ = await self._extends.run(it.id, lambda: self.gate.act(click))
        return answers.ephemeral(decisions.extend_message(result, utcnow()))

    async def _may_act(
        self, it: Interaction, *, approving: bool = False
    ) -> tuple[Answer | None, Any]:
        """Before a modal opens: a private refusal, or None and the request's view (a modal
        that approves does not open from a card that cut the call)."""
        refusal, view = await decisions.refusal(
            self.gate, self.name, it.request_id, it.user_id, approving=approving
        )
        if refusal or view is None:
            return answers.ephemeral(refusal or "This request no longer exists."), None
        return None, view

    async def _ask_reason(self, it: Interaction) -> Answer:
        """Reject… (or a pick of preset reasons) opens the reason modal."""
        refused, view = await self._may_act(it)
        if refused is not None:
            return refused
        try:
            # the option values are `r<index>` into the reasons the card was built from
            decisions.reasons_from(view, list(it.values))
        except ValueError as exc:
            return answers.ephemeral(f"Not recorded: {exc}.")
        picked = sorted({int(v[1:]) for v in it.values})
        return answers.modal(await anyio.to_thread.run_sync(reason_modal, view, picked))

    async def _ask_edits(self, it: Interaction) -> Answer:
        """Edit & approve… opens a modal with one box per editable argument."""
        refused, view = await self._may_act(it, approving=True)
        if refused is not None:
            return refused
        fields = await anyio.to_thread.run_sync(editable, view)
        if not fields:
            return answers.ephemeral(
                "Nothing here can be edited in Discord; edit it in gate:", view.url
            )
        return answers.modal(await anyio.to_thread.run_sync(edit_modal, view, fields))

    async def _ask_grant(self, it: Interaction) -> Answer:
        """A pick in "Approve for a while…" opens a modal to confirm it."""
        try:
            scope, duration = decisions.parse_grant(it.values[0])
            if len(duration) > ids.MAX_DURATION or not (duration.isascii() and duration.isalnum()):
                raise ValueError(f"not a grant choice: {it.values[0][:40]!r}")
        except ValueError as exc:
            return answers.ephemeral(f"Not recorded: {exc}.")
        refused, view = await self._may_act(it, approving=True)
        if refused is not None:
            return refused
        offered = {(g.scope, g.duration): g.label for g in decisions.grant_choices(view)}
        label = offered.get((scope, duration), f"Approve + allow {scope} for {duration}")
        return answers.modal(grant_modal(view, scope, duration, plain(label, 100)))

    async def _reject(self, it: Interaction) -> Answer:
        """The reason modal was submitted: reject with the reason and the picked presets."""
        assert it.custom is not None
        reason = self._note(it, REASON_INPUT)
        view = await self.gate.view(it.request_id)
        try:
            values = ids.reasons_from_mask(it.custom.args[0])
            reasons = decisions.reasons_from(view, values) if view and values else []
        except ValueError as exc:
            return answers.ephemeral(f"Not recorded: {exc}.")
        if not reason and not reasons:
            return answers.ephemeral(NEED_A_REASON)
        click = self._click(it, "reject", comment=reason, reasons=tuple(reasons))
        return await answers.decided(it, await self.gate.act(click))

    async def _edit(self, it: Interaction) -> Answer:
        """The "Edit & approve" modal was submitted: approve with the edited arguments."""
        view = await self.gate.view(it.request_id)
        by_input = fields_by_input(view)
        if view is None or view.is_final or not by_input:
            why, _ = await decisions.refusal(self.gate, self.name, it.request_id, it.user_id)
            return answers.ephemeral(why or "Nothing here can be edited any more.")
        texts = {by_input[k].key: text for k, text in it.inputs.items() if k in by_input}
        edited, errors = edits.apply_edits(view, list(by_input.values()), texts)
        if errors:
            named = "; ".join(f"{plain(key, 40)}: {why}" for key, why in errors.items())
            return answers.ephemeral(f"Not recorded: {named}")
        # gate gets the changed arguments by name; the rest keep the values asked for
        changed = {key: d["to"] for key, d in argument_diff(view.tool_args, edited).items()}
        click = self._click(it, "approve", comment=self._note(it, NOTE_INPUT), edits=changed)
        return await answers.decided(it, await self.gate.act(click))

    async def _grant(self, it: Interaction) -> Answer:
        """The grant modal was submitted: approve, and grant what was picked."""
        assert it.custom is not None
        scope, duration = it.custom.args
        click = self._click(
            it, "approve", comment=self._note(it, NOTE_INPUT), grant=(scope, duration)
        )
        return await answers.decided(it, await self.gate.act(click))
