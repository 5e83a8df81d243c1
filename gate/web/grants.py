"""The Grants page: active grants, then recently ended ones, each revocable by an approver.

Listing and revoking go through `gate.decisions.grant_review`, as the API's do, with a `Principal`
for the signed-in approver.
"""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gate.base.errors import GateError
from gate.base.statuses import GrantStatus
from gate.config.settings import ApproverSettings
from gate.decisions import grant_review, grants
from gate.identity.auth import Principal
from gate.store.tables import Grant
from gate.text import untrusted
from gate.web.console import ListPage, Posted, sentence
from gate.web.session import WebSession

#: how many ended grants the Grants page shows under the active ones
RECENTLY_ENDED = 50


def principal_of(me: ApproverSettings) -> Principal:
    """The signed-in approver as the API would see them (role approver)."""
    return Principal(me.name, "approver", me)


class GrantsPage(ListPage):
    """The Grants page and its Revoke buttons, sharing the console's plumbing."""

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
        """Active grants, then recently ended ones."""
        now = self.state.clock()
        rows = grant_review.list_grants(self.state.service, principal_of(me), active_only=False)
        active = [g for g in rows if g.status == GrantStatus.active and g.expires_at > now]
        ended = [g for g in rows if g not in active][:RECENTLY_ENDED]
        return self.console.render(
            request,
            session,
            "grants.html",
            me=me,
            status=status,
            active=active,
            ended=ended,
            ended_status=_ended_status,
            uses=_uses,
            pinned=_pinned,
            notice=notice,
            error=error,
        )

    async def revoke(self, request: Request, grant_id: str) -> Response:
        """Revoke a grant from the Grants page; done, it redirects back there."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        session, me = posted.session, posted.me
        principal = principal_of(me)
        try:
            grant = await anyio.to_thread.run_sync(
                lambda: grant_review.revoke_grant(self.state.service, grant_id, principal)
            )
        except GateError as exc:
            error, status = sentence(exc.message), exc.status
            return await anyio.to_thread.run_sync(
                lambda: self.page(request, session, me, status=status, error=error)
            )
        notice = (
            f"Revoked the grant for {grant.tool_name} ({grant.scope}): "
            "calls it covered ask a person again."
        )
        return self.console.redirect(request, session, "/grants", notice)

    def router(self) -> APIRouter:
        """The Grants page's routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/grants", self.show, methods=["GET"])

        @r.get("/grants/{grant_id}/revoke")
        def revoke_address(grant_id: str) -> Response:
            return RedirectResponse("/grants", status_code=303)

        @r.post("/grants/{grant_id}/revoke")
        async def revoke(grant_id: str, request: Request) -> Response:
            return await self.revoke(request, grant_id)

        return r


def _ended_status(grant: Grant) -> str:
    # An active row past its time is expired for every purpose; the sweep just has not run.
    if grant.status == GrantStatus.active:
        return "expired"
    return "used up" if grant.status == GrantStatus.used_up else grant.status


def _uses(grant: Grant) -> str:
    """ "2 of 3 (1 left)", or the bare count of a grant that counts only time."""
    left = grants.uses_left(grant)
    if left is None:
        return str(grant.uses)
    return f"{grant.uses} of {grant.max_uses} ({left} left)"


def _pinned(grant: Grant) -> str:
    """A pattern grant's pinned arguments, as the agent sent them (masked, made inert)."""
    return ", ".join(
        f"{untrusted.clean(name, 80)}={untrusted.to_json(value, limit=200)}"
        for name, value in (grant.pinned or {}).items()
    )
