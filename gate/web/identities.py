"""The Identities page: the chat identities the signed-in approver acts under, how each is
bound, a one-time code to link one more from a chat platform, and Unbind.

The bindings are `gate.decisions.identities`'; gate.toml's and the email address are shown
but change only in gate.toml. A platform is offered for linking when its channel is
configured and says how to send a code (`link_hint`, e.g. Slack's `/gate link <code>`).
"""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gate.config.settings import ApproverSettings
from gate.decisions import identities
from gate.web.console import ListPage, Posted
from gate.web.forms import field_of
from gate.web.session import WebSession

#: how the page says each binding came about
HOW = {
    "configured_id": "gate.toml",
    "idp_claim": "identity provider",
    "link": "linked from gate",
    "email": "email address (gate.toml)",
}


class IdentitiesPage(ListPage):
    """GET /identities, POST /identities/link and POST /identities/{id}/unbind."""

    def linkable(self) -> dict[str, str]:
        """Platform -> how to send a link code there, for each configured channel that can."""
        hints = {}
        for name, channel in self.state.channels.items():
            hint = getattr(channel, "link_hint", None)
            if isinstance(hint, str) and name in identities.PLATFORMS:
                hints[name] = hint
        return hints

    def page(
        self,
        request: Request,
        session: WebSession,
        me: ApproverSettings,
        *,
        status: int = 200,
        notice: str | None = None,
        error: str | None = None,
        code: tuple[str, str] | None = None,
    ) -> HTMLResponse:
        """The approver's identities, the platforms they can link, and a fresh code if any."""
        found = identities.bindings(self.state.settings, self.state.db, me)
        hints = self.linkable()
        return self.console.render(
            request,
            session,
            "identities.html",
            me=me,
            status=status,
            bindings=found,
            how=HOW,
            label=identities.label,
            linkable=sorted(hints),
            code=code[1] if code else None,
            code_hint=hints[code[0]].format(code=code[1]) if code else None,
            code_minutes=int(identities.CODE_LIFETIME.total_seconds() // 60),
            notice=notice,
            error=error,
        )

    async def link(self, request: Request) -> Response:
        """A one-time code for the platform asked, shown once on the page (never stored)."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        session, me = posted.session, posted.me
        platform = field_of(posted.form, "platform") or ""
        if platform not in self.linkable():
            error = f"gate cannot link an identity on {platform[:40]!r} (no such channel here)."
            return await anyio.to_thread.run_sync(
                lambda: self.page(request, session, me, status=400, error=error)
            )
        code = await anyio.to_thread.run_sync(
            lambda: identities.start_link(self.state.db, me, platform, self.state.clock())
        )
        return await anyio.to_thread.run_sync(
            lambda: self.page(request, session, me, code=(platform, code))
        )

    async def unbind(self, request: Request, identity_id: int) -> Response:
        """End one of the approver's database bindings; back to the page with what happened."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        session, me = posted.session, posted.me
        done = await anyio.to_thread.run_sync(
            lambda: identities.unbind(self.state.db, me, identity_id, self.state.clock())
        )
        text = (
            "Unbound: clicks from that account no longer count as you."
            if done
            else "Nothing to unbind: that identity is not bound to you (any more)."
        )
        return self.console.redirect(request, session, "/identities", text, ok=done)

    def router(self) -> APIRouter:
        """The Identities page's routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/identities", self.show, methods=["GET"])
        r.add_api_route("/identities/link", self.link, methods=["POST"])

        @r.get("/identities/link")
        def link_address() -> Response:
            return RedirectResponse("/identities", status_code=303)

        @r.get("/identities/{identity_id}/unbind")
        def unbind_address(identity_id: str) -> Response:
            return RedirectResponse("/identities", status_code=303)

        @r.post("/identities/{identity_id}/unbind")
        async def unbind(identity_id: int, request: Request) -> Response:
            return await self.unbind(request, identity_id)

        return r
