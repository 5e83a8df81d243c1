"""The console beyond yes/no: the Grants page, revoking a grant, extending a deadline, and
what the request page adds (edit form, grant picker, preset reasons, outcome, audit chain).

Every change goes through `gate.followups` or `GateService.decide`, as the API's does, with a
`Principal` for the signed-in approver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gate import deciding, followups, machine, untrusted
from gate.acting import Actor
from gate.auth import Principal, csrf_matches
from gate.config import ApproverSettings
from gate.errors import GateError
from gate.models import Grant, GrantStatus
from gate.readmodel import RequestView
from gate.web import forms, queries
from gate.web.forms import EXTEND_CHOICES, DecideForm, field_of
from gate.web.session import CSRF_FIELD, WebSession

if TYPE_CHECKING:
    from gate.api.web import Console

#: how many ended grants the Grants page shows under the active ones
RECENTLY_ENDED = 50


def principal_of(me: ApproverSettings) -> Principal:
    """The signed-in approver as the API would see them (role approver)."""
    return Principal(me.name, "approver", me)


def sentence(message: str) -> str:
    """An error message as a sentence for the page."""
    text = message[:1].upper() + message[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


def detail_context(
    console: Console,
    view: RequestView,
    *,
    can_decide: bool,
    refusal: str | None,
    form: DecideForm | None,
) -> dict[str, Any]:
    """What the request page shows beyond the basic decide forms."""
    db = console.state.db
    sticky = form or DecideForm(verdict="", comment="")
    outcome_summary = None
    if view.outcome:
        event = next((a for a in reversed(view.audit) if a.kind == view.outcome), None)
        outcome_summary = event.detail.get("summary") if event else None
    edits = next(
        (a.detail["edits"] for a in view.audit if a.kind == "approved" and a.detail.get("edits")),
        None,
    )
    durations = forms.grant_durations(view)
    return {
        "can_edit": can_decide and view.offers.allow_edits,
        "edit_text": sticky.edit_text
        if sticky.edit_text is not None
        else forms_pretty(view.tool_args),
        "comment": sticky.comment if sticky.verdict == "reject" else "",
        "approve_comment": sticky.comment if sticky.verdict == "approve" else "",
        "reject_reasons": list(view.offers.reject_reasons),
        "checked_reasons": sticky.reasons,
        "grant_scopes": forms.grant_scopes(view) if can_decide else [],
        "grant_durations": durations,
        "grant_default": "30m" if ("30m", "30 minutes") in durations else durations[-1][0],
        "can_extend": not view.is_final and refusal is None,
        "extend_choices": EXTEND_CHOICES,
        "source_grant": queries.grant(db, view.grant_id) if view.grant_id else None,
        "grants_made": queries.grants_from(db, view.id),
        "chain": queries.audit_chain(db, view.id),
        "outcome_summary": outcome_summary,
        "edits": edits,
    }


def forms_pretty(obj: Any) -> str:
    """Arguments as the editor shows them: the page's pretty JSON, secrets masked (the
    decide handler puts masked values back, see `untrusted.unmask`)."""
    return untrusted.to_json(obj, indent=2)


class Beyond:
    """Routes for grants and deadlines, sharing the console's plumbing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.state = console.state

    def grants_page(
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
        rows = followups.list_grants(self.state.service, principal_of(me), active_only=False)
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
            notice=notice,
            error=error,
        )

    async def revoke(self, request: Request, grant_id: str) -> Response:
        """Revoke a grant from the Grants page; done, it redirects back there."""
        console = self.console
        session, me = await console.who_async(request)
        form = await request.form()
        if not csrf_matches(session.csrf, field_of(form, CSRF_FIELD)):
            return console.refuse_csrf(request, session, me)
        if me is None:
            return console.to_login(request)
        principal = principal_of(me)
        try:
            grant = await anyio.to_thread.run_sync(
                lambda: followups.revoke_grant(self.state.service, grant_id, principal)
            )
        except GateError as exc:
            error, status = sentence(exc.message), exc.status
            return await anyio.to_thread.run_sync(
                lambda: self.grants_page(request, session, me, status=status, error=error)
            )
        notice = (
            f"Revoked the grant for {grant.tool_name} ({grant.scope}): "
            "calls it covered ask a person again."
        )
        return console.redirect(request, session, "/grants", notice)

    async def extend(self, request: Request, request_id: str) -> Response:
        """The "extend deadline" buttons; done, they redirect to the request's page."""
        console = self.console
        session, me = await console.who_async(request)
        form = await request.form()
        if not csrf_matches(session.csrf, field_of(form, CSRF_FIELD)):
            return console.refuse_csrf(request, session, me)
        if me is None:
            return console.to_login(request)
        by = field_of(form, "by") or ""
        if by not in EXTEND_CHOICES:
            error, status = f"Extend by {' or '.join(EXTEND_CHOICES)}, not {by!r}.", 422
        else:
            actor = Actor.of_approver(me, "web")
            result = await anyio.to_thread.run_sync(
                lambda: deciding.extend(self.state.service, request_id, actor, by)
            )
            view = result.view
            if isinstance(result.outcome, machine.Extended) and view is not None:
                notice = f"Deadline extended by {by}: now {view.expires_at:%Y-%m-%d %H:%M:%S} UTC."
                return console.redirect(request, session, f"/requests/{request_id}", notice)
            error = sentence(result.message().removeprefix("Not recorded: "))
            status = result.refusal.status if result.refusal else 409
        return await anyio.to_thread.run_sync(
            lambda: console.detail(request, session, me, request_id, status=status, error=error)
        )

    def router(self) -> APIRouter:
        """The grants and deadline routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)

        @r.get("/grants")
        def grants(request: Request) -> Response:
            session, me = self.console.who(request)
            if me is None:
                return self.console.to_login(request)
            flash = session.notice_for(request.url.path)
            if flash is None:
                return self.grants_page(request, session, me)
            if flash.ok:
                return self.grants_page(request, session, me, notice=flash.text)
            return self.grants_page(request, session, me, error=flash.text)

        @r.get("/grants/{grant_id}/revoke")
        def revoke_address(grant_id: str) -> Response:
            return RedirectResponse("/grants", status_code=303)

        @r.post("/grants/{grant_id}/revoke")
        async def revoke(grant_id: str, request: Request) -> Response:
            return await self.revoke(request, grant_id)

        @r.post("/requests/{request_id}/extend")
        async def extend(request_id: str, request: Request) -> Response:
            return await self.extend(request, request_id)

        return r


def _ended_status(grant: Grant) -> str:
    # An active row past its time is expired for every purpose; the sweep just has not run.
    return "expired" if grant.status == GrantStatus.active else grant.status
