"""Slack interactions turned into gate's neutral `Click`, and the clicker answered.

Each verified `Interaction` becomes one `gate.delivery.channel.Click` (edits by argument name, a
grant as (scope, duration), preset reasons as their text) and goes through `ChannelContext.act`,
gate's one decision pipeline, which says who may act and what the rule offers. What comes
back is rendered by `channels.slack.answers`. Slack's own parts stay here: opening a modal
with the click's trigger (within Slack's 3 s), and telling a repeated delivery of a click
from a new one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Literal, Protocol

import anyio
from fastapi import BackgroundTasks, Response

from channels import decisions, edits
from channels.inbound import Once
from channels.slack.answers import (
    approve_answer,
    ephemeral_text,
    modal_error,
    modal_errors,
    submission_answer,
)
from channels.slack.callback import SIGNATURE_WINDOW_SECONDS, Interaction
from channels.slack.modals import (
    COMMENT_BLOCK,
    REASON_BLOCK,
    REASONS_BLOCK,
    edit_modal,
    editable,
    fields_by_block,
    reason_modal,
)
from channels.slack.mrkdwn import MAX_REASON
from gate.asking.binding import argument_diff
from gate.base.statuses import RequestStatus, utcnow
from gate.decisions.acting import Result
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import ChannelContext, Click, DeliveryError

log = logging.getLogger("gate.channels.slack")

#: views.open must use the trigger_id within Slack's 3 s; leave room to answer the click
INTERACTIVE_TIMEOUT = 2.5
#: Extend clicks remembered to tell a repeat delivery from a new click (far more than a team
#: makes in the five-minute window)
EXTEND_MEMORY = 10_000


class SlackCall(Protocol):
    """One Slack Web API call (`SlackChannel.call`); failures raise DeliveryError."""

    async def __call__(self, method: str, /, **kwargs: Any) -> Any: ...


class Clicks:
    """Handles verified interactions for one Slack channel."""

    def __init__(
        self, name: str, gate: ChannelContext, call: SlackCall, *, clock: Callable[[], float]
    ) -> None:
        self.name = name
        self.gate = gate
        self._call = call
        # Extend is the one click that is not idempotent (each one adds time), so a retried
        # or replayed delivery of it must be recognised; every other click decides, and a
        # second decision is refused by the state machine anyway.
        self._extends: Once[Result] = Once(
            size=EXTEND_MEMORY, window=SIGNATURE_WINDOW_SECONDS, clock=clock
        )

    async def handle(
        self, it: Interaction, background: BackgroundTasks, *, retry: bool
    ) -> Response:
        """Act on one interaction; `retry` is set when Slack says it is a repeat delivery."""
        if it.kind == "approve":
            await self._approve(it, background, retry=retry)
        elif it.kind in ("ask_reason", "ask_edits"):
            await self._open_modal(it, background)
        elif it.kind == "extend":
            await self._extend(it, background)
        elif it.kind == "acknowledge":  # idempotent: a second one is told who was first
            result = await self.gate.act(Click(self.name, it.user_id, it.request_id, "acknowledge"))
            self._tell(background, it, result.message())
        elif it.kind == "reject":
            return await self._reject(it, retry=retry)
        elif it.kind == "edit":
            return await self._edit(it, retry=retry)
        return Response(status_code=200)

    def _click(
        self,
        it: Interaction,
        action: Literal["approve", "reject"],
        *,
        reasons: list[str] | None = None,
        edits: dict[str, Any] | None = None,
    ) -> Click:
        """The neutral click; the modal's text (if any) is the comment."""
        return Click(
            self.name,
            it.user_id,
            it.request_id,
            action,
            comment=(it.reason or "")[:MAX_REASON] or None,
            reasons=tuple(reasons or ()),
            edits=edits,
            grant=it.grant if action == "approve" else None,
        )

    async def _approve(self, it: Interaction, background: BackgroundTasks, *, retry: bool) -> None:
        result = await self.gate.act(self._click(it, "approve"))
        text = approve_answer(result, retry=retry)
        if text is not None:
            self._tell(background, it, text)

    async def _open_modal(self, it: Interaction, background: BackgroundTasks) -> None:
        """Reject... and Edit & approve... open a modal (with the click's trigger_id)."""
        refusal, view = await decisions.refusal(
            self.gate, self.name, it.request_id, it.user_id, approving=it.kind == "ask_edits"
        )
        if refusal or view is None:
            self._tell(background, it, refusal or "This request no longer exists.")
            return
        what = "reason" if it.kind == "ask_reason" else "edit"
        modal = await anyio.to_thread.run_sync(_modal_for, it, view)
        if modal is None:
            text = f"Nothing here can be edited in Slack; edit it in gate: {view.url}"
            self._tell(background, it, text)
            return
        if it.trigger_id is None:
            self._tell(background, it, f"Slack sent no trigger to open the {what} dialog.")
            return
        try:
            async with asyncio.timeout(INTERACTIVE_TIMEOUT):
                await self._call("views.open", trigger_id=it.trigger_id, view=modal)
        except (DeliveryError, TimeoutError) as exc:
            log.warning("views.open for %s failed: %s", it.request_id, exc)
            self._tell(background, it, f"Could not open the {what} dialog; use {view.url}")

    async def _extend(self, it: Interaction, background: BackgroundTasks) -> None:
        """One click, one extension: a repeat delivery of the click shares the first's result.

        Slack may deliver a click again (a retry after a slow answer), and a captured signed
        body can be replayed for five minutes; both carry the click's trigger_id and
        action_ts, so they are recognised and answered without moving the deadline again.
        """

        async def extend() -> Result:
            click = Click(
                self.name,
                it.user_id,
                it.request_id,
                "extend",
                extend_by=decisions.EXTEND_BY,
                extend_from=it.extend_from,
            )
            return await self.gate.act(click)

        result, repeat = await self._extends.run(it.click_id, extend)
        if repeat:
            return  # the clicker was answered when the click was first handled
        # Moved: the outbox refreshes the card for everybody; the clicker also hears it here.
        self._tell(background, it, decisions.extend_message(result, utcnow()))

    async def _reject(self, it: Interaction, *, retry: bool) -> Response:
        """The reject modal was submitted: reject with the reason and the picked presets."""
        if not it.reason and not it.reasons:
            return modal_error("Say why, so the agent knows what to do instead.")
        view = await self.gate.view(it.request_id)
        block = REASONS_BLOCK if it.reasons else REASON_BLOCK
        try:
            # the option values are `r<index>` into the reasons the modal was built from
            reasons = decisions.reasons_from(view, list(it.reasons)) if view else []
        except ValueError as exc:
            return modal_error(str(exc), block)
        result = await self.gate.act(self._click(it, "reject", reasons=reasons))
        return submission_answer(
            result, RequestStatus.rejected, retry=retry, offer_block=block, block=REASON_BLOCK
        )

    async def _edit(self, it: Interaction, *, retry: bool) -> Response:
        """The "Edit & approve" modal was submitted: approve with the edited arguments."""
        view = await self.gate.view(it.request_id)
        by_block = fields_by_block(view)
        first = next(iter(by_block), COMMENT_BLOCK)
        if view is None or view.is_final or not by_block:
            why, _ = await decisions.refusal(self.gate, self.name, it.request_id, it.user_id)
            return modal_error(why or "Nothing here can be edited any more.", first)
        texts = {by_block[b].key: text for b, text in it.edits if b in by_block}
        edited, errors = edits.apply_edits(view, list(by_block.values()), texts)
        if errors:
            block_of = {f.key: b for b, f in by_block.items()}
            return modal_errors({block_of[k]: why for k, why in errors.items()})
        # gate gets the changed arguments by name; the rest keep the values asked for
        changed = argument_diff(view.tool_args, edited)
        click = self._click(it, "approve", edits={key: d["to"] for key, d in changed.items()})
        result = await self.gate.act(click)
        return submission_answer(
            result, RequestStatus.approved, retry=retry, offer_block=first, block=first
        )

    def _tell(self, background: BackgroundTasks, it: Interaction, text: str) -> None:
        """Answer the clicker privately, after the 200 has gone out."""
        if it.channel_id:
            background.add_task(self._ephemeral, it.channel_id, it.user_id, text)

    async def _ephemeral(self, channel: str, user: str, text: str) -> None:
        try:
            await self._call(
                "chat.postEphemeral", channel=channel, user=user, text=ephemeral_text(text)
            )
        except DeliveryError as exc:
            log.warning("ephemeral to %s in %s failed: %s", user, channel, exc)


def _modal_for(it: Interaction, view: RequestView) -> dict[str, Any] | None:
    """The reject or edit modal for a click (None: nothing to edit); run in a worker thread."""
    if it.kind == "ask_reason":
        reasons = decisions.reject_reasons(view)
        return reason_modal(view.id, it.channel_id, it.message_ts, reasons)
    fields = editable(view)
    if not fields:
        return None
    return edit_modal(view, fields, it.channel_id, it.message_ts)
