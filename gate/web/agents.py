"""The Agents page: agents tripped by their rejections (`gate.decisions.denials`), each with a Reset
button, then the latest trips and who reset them.

Resetting goes through `denials.reset`, as `POST /v1/agents/reset` does: one transaction,
an audit event on the request that tripped the agent, and a log line.
"""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gate.config.settings import ApproverSettings
from gate.decisions import denials
from gate.inputs.bodies import text_problem
from gate.store import trips
from gate.store.records import TripRow
from gate.web.console import ListPage, Posted
from gate.web.forms import field_of
from gate.web.session import WebSession

#: how many trips, active and reset, the page lists
RECENT_TRIPS = 50


class AgentsPage(ListPage):
    """The Agents page and its Reset buttons."""

    def _recent(self) -> list[TripRow]:
        with self.state.db.read_conn() as conn:
            return trips.recent(conn, RECENT_TRIPS)

    def page(
        self,
        request: Request,
        session: WebSession,
        me: ApproverSettings,
        *,
        notice: str | None = None,
        error: str | None = None,
    ) -> HTMLResponse:
        """Tripped agents first, then every recent trip (reads the database: not async)."""
        recent = self._recent()
        denials_table = self.state.settings.denials
        return self.console.render(
            request,
            session,
            "agents.html",
            me=me,
            active=[t for t in recent if t.reset_at is None],
            recent=recent,
            limits=denials_table,
            notice=notice,
            error=error,
        )

    async def reset(self, request: Request) -> Response:
        """Reset the agent named in the form; done, it redirects back to the page."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        agent = (field_of(posted.form, "agent") or "")[:200]
        if not agent or text_problem(agent) is not None:  # no agent is called that
            text = "No agent was named that can be tripped."
            return self.console.redirect(request, posted.session, "/agents", text, ok=False)
        by = posted.me.name
        ended = await anyio.to_thread.run_sync(
            lambda: denials.reset(self.state.service, agent, by=by, via="web")
        )
        if ended is None:
            text = f"Agent {agent!r} is not tripped (someone may have reset it already)."
            return self.console.redirect(request, posted.session, "/agents", text, ok=False)
        text = f"Reset agent {agent!r}: its calls are decided by policy again."
        return self.console.redirect(request, posted.session, "/agents", text)

    def router(self) -> APIRouter:
        """The Agents page's routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/agents", self.show, methods=["GET"])
        r.add_api_route("/agents/reset", self.reset, methods=["POST"])

        @r.get("/agents/reset")
        def reset_address() -> Response:
            return RedirectResponse("/agents", status_code=303)

        return r
