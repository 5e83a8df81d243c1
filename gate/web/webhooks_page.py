"""The Webhooks page: the newest `[[webhooks]]` messages with their status, attempts and
last error, and a Resend button on each dead one (shown only when webhooks are configured).

Reading and resending go through `gate.store.webhooks`; a resent message keeps its
`webhook-id` and payload, so a receiver that did get it before can tell it is the same.
"""

from __future__ import annotations

import logging

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gate.base.statuses import DeliveryStatus
from gate.config.settings import ApproverSettings
from gate.store import webhooks
from gate.web.console import ListPage, Posted
from gate.web.session import WebSession

log = logging.getLogger("gate.webhooks")

#: how many messages the page lists, newest first
SHOWN = 100


class WebhooksPage(ListPage):
    """The Webhooks page and its Resend buttons, sharing the console's plumbing."""

    def page(
        self,
        request: Request,
        session: WebSession,
        me: ApproverSettings,
        *,
        status: int = 200,
        notice: str | None = None,
        error: str | None = None,
    ) -> HTMLResponse:
        """The configured webhooks, then their newest messages."""
        db = self.state.db
        return self.console.render(
            request,
            session,
            "webhooks.html",
            me=me,
            status=status,
            hooks=self.state.settings.webhooks,
            rows=webhooks.recent(db, limit=SHOWN),
            counts=webhooks.counts(db),
            dead=DeliveryStatus.dead.value,
            notice=notice,
            error=error,
        )

    async def resend(self, request: Request, row_id: int) -> Response:
        """Make a dead message due again; done, it redirects back to the page."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        session, me = posted.session, posted.me
        now = self.state.clock()
        row = await anyio.to_thread.run_sync(webhooks.resend, self.state.db, row_id, now)
        if row is None:
            error = f"No dead webhook message with id {row_id}: it was sent or resent already."
            return await anyio.to_thread.run_sync(
                lambda: self.page(request, session, me, status=409, error=error)
            )
        log.info("webhook %s message %s resent by %s", row.webhook, row.msg_id, me.name)
        notice = (
            f"Resending {row.event} message {row.msg_id} to {row.webhook} "
            f"(asked by {me.name}): it is due now, with fresh attempts."
        )
        return self.console.redirect(request, session, "/webhooks", notice)

    def router(self) -> APIRouter:
        """The Webhooks page's routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/webhooks", self.show, methods=["GET"])

        @r.get("/webhooks/{row_id}/resend")
        def resend_address(row_id: int) -> Response:
            return RedirectResponse("/webhooks", status_code=303)

        @r.post("/webhooks/{row_id}/resend")
        async def resend(row_id: int, request: Request) -> Response:
            return await self.resend(request, row_id)

        return r
