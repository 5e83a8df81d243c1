"""A request's page and its forms: Approve (with edits, with a grant), Reject (with reasons),
Extend deadline; and what the page shows besides (outcome, grants made, the audit chain).

Every change goes through the one decision pipeline (`gate.decisions.deciding`) with the signed-in
approver as the actor, so the page follows exactly the API's rules on who may act and what
the rule offers. A recorded change redirects back to the page (POST/redirect/GET); a form
the page must show again (bad JSON, a missing reason, a refusal) is answered in place.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from gate.base.errors import GateError, InvalidInput
from gate.base.statuses import Verdict
from gate.decisions import acknowledging, audit, deciding, outcomes
from gate.decisions.acting import Actor, Refusal, Result
from gate.decisions.outcomes import Acknowledged
from gate.decisions.readmodel import RequestView
from gate.identity.authmethod import AuthMethod
from gate.identity.passkeys import PasskeyRefused
from gate.policy import stepup
from gate.store import listing
from gate.text import untrusted
from gate.web import calls, forms, queries
from gate.web.console import Console, Posted, sentence
from gate.web.forms import EXTEND_CHOICES, MAX_COMMENT, DecideForm, FormError, field_of
from gate.web.passkey_approval import NONCE_FIELD, PasskeyApproval, needs_passkey
from gate.web.session import SignedIn, WebSession

#: how much of a call's arguments this page shows (`Actor.args_chars`): all of it, masked; so
#: only a mask that could hide code keeps a call from being shown, and approved, here
SHOWN = untrusted.ANY_LENGTH


class RequestPage:
    """The request page and its forms, sharing the console's plumbing."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.service = console.service
        self.passkeys = PasskeyApproval(console, self.unmasked)

    def detail(
        self,
        request: Request,
        session: WebSession,
        signed: SignedIn,
        request_id: str,
        *,
        status: int = 200,
        notice: str | None = None,
        error: str | None = None,
        form: DecideForm | None = None,
    ) -> HTMLResponse:
        """The request detail page, with the decide forms when the signed-in approver may
        decide (and, for a step-up rule, the way to sign in again first)."""
        me = signed.approver
        if notice is None and error is None:
            flash = session.notice_for(request.url.path)
            if flash is not None:
                notice, error = (flash.text, None) if flash.ok else (None, flash.text)
        view = self.service.view(request_id, full=True)
        if view is None:
            return self.console.error(
                request, session, me, 404, "Not found", f"No request with id {request_id!r}."
            )
        my_vote = next((v for v in view.votes if v.approver == me.name), None)
        refusal = None if view.is_final else self.console.refusal(view, me, signed.groups)
        step_up = None
        if not view.is_final:  # the sign-in part: a passkey is asked for when approving
            now = self.console.state.clock()
            step_up = stepup.sign_in_refusal(view.offers.step_up, signed.auth, now)
        can_decide = not view.is_final and refusal is None and my_vote is None
        return self.console.render(
            request,
            session,
            "detail.html",
            me=me,
            status=status,
            view=view,
            can_decide=can_decide,
            refusal=refusal,
            step_up=step_up,
            needs_passkey=needs_passkey(view),
            my_vote=my_vote,
            notice=notice,
            error=error,
            max_comment=MAX_COMMENT,
            **detail_context(self.console, view, can_decide=can_decide, refusal=refusal, form=form),
        )

    async def again(
        self,
        request: Request,
        posted: Posted,
        request_id: str,
        status: int,
        error: str,
        form: DecideForm | None = None,
    ) -> Response:
        """The page again with `error` beside the form as sent (off the event loop)."""
        session, signed = posted.session, posted.signed
        return await anyio.to_thread.run_sync(
            lambda: self.detail(
                request, session, signed, request_id, status=status, error=error, form=form
            )
        )

    def unmasked(self, request_id: str, edited: dict[str, Any] | None) -> dict[str, Any] | None:
        """Edited arguments with what the page showed masked or cut put back to the original
        (`untrusted.unmask`); InvalidInput when such a value was changed."""
        view = self.service.view(request_id) if edited is not None else None
        if edited is None or view is None:
            return edited  # deciding says what is wrong with a missing request
        try:
            restored: dict[str, Any] = untrusted.unmask(edited, view.tool_args)
        except ValueError as exc:
            raise InvalidInput(str(exc), code="masked_value_changed") from None
        return restored

    async def decide(self, request: Request, request_id: str) -> Response:
        """Handle the Approve, Approve with edits and Reject forms."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        try:
            parsed = forms.parse_decide(posted.form)
        except FormError as exc:
            return await self.again(
                request, posted, request_id, exc.http_status, exc.message, exc.form
            )
        try:
            edited = self.unmasked(request_id, parsed.edited_args)
        except GateError as exc:  # an edit around a masked value
            return await self.again(
                request, posted, request_id, exc.status, sentence(exc.message), parsed
            )
        signed = posted.signed
        auth = signed.auth
        if parsed.verdict == Verdict.approve.value:
            try:
                auth = await anyio.to_thread.run_sync(
                    self.passkey_auth, signed, request_id, posted.form, edited
                )
            except PasskeyRefused as exc:
                error = sentence(exc.reason)
                return await self.again(request, posted, request_id, 403, error, parsed)
        result = await anyio.to_thread.run_sync(
            lambda: deciding.decide(
                self.service,
                request_id,
                self.actor(signed, request_id, Verdict(parsed.verdict), auth),
                Verdict(parsed.verdict),
                parsed.comment or None,
                edited_args=edited,
                reasons=parsed.reasons or (),
                grant=parsed.grant,
            )
        )
        if result.refusal is Refusal.not_offered:  # the rule offers no such edit, reason, grant
            error = sentence(result.detail or result.message())
            return await self.again(request, posted, request_id, 422, error, parsed)
        status = _result_status(result)
        message = result.message()
        if status != 200:
            return await self.again(request, posted, request_id, status, message)
        if result.view is not None and result.view.approved_args is not None:
            message += " The call runs with your edited arguments."
        return self.console.redirect(request, posted.session, f"/requests/{request_id}", message)

    def passkey_auth(
        self, signed: SignedIn, request_id: str, form: Any, edited: dict[str, Any] | None
    ) -> AuthMethod:
        """How an approval posted on this page was authenticated: the sign-in, plus the
        passkey's assertion when the rule asks for one (checked here, before the pipeline:
        `gate.web.passkey_approval`; PasskeyRefused when it does not count)."""
        if not field_of(form, NONCE_FIELD):
            # no read on the plain form's way: should the rule want a passkey, the pipeline
            # refuses a sign-in alone (`gate.policy.stepup`)
            return signed.auth
        view = self.service.view(request_id)
        if view is None or not needs_passkey(view) or view.is_final:
            return signed.auth  # the pipeline answers for a missing or decided request
        return self.passkeys.check(signed, view, form, edited)

    def actor(
        self, signed: SignedIn, request_id: str, verdict: Verdict, auth: AuthMethod | None = None
    ) -> Actor:
        """The signed-in approver deciding on this page, which shows the call whole but masked:
        an approval counts for the masked values they revealed (one read, approvals only);
        `auth` is how they were authenticated, when more than their sign-in (a passkey)."""
        me, groups = signed.approver, signed.groups
        auth = auth or signed.auth
        revealed = None
        if verdict is Verdict.approve:
            revealed = audit.revealed(self.console.state.db, request_id, me.name)
        return Actor.of_approver(
            me, "web", args_chars=SHOWN, revealed=revealed, auth=auth, groups=groups
        )

    async def extend(self, request: Request, request_id: str) -> Response:
        """The "extend deadline" buttons; done, they redirect to the request's page."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        by = field_of(posted.form, "by") or ""
        if by not in EXTEND_CHOICES:
            error = f"Extend by {' or '.join(EXTEND_CHOICES)}, not {by!r}."
            return await self.again(request, posted, request_id, 422, error)
        actor = Actor.of_approver(
            posted.me, "web", auth=posted.signed.auth, groups=posted.signed.groups
        )
        result = await anyio.to_thread.run_sync(
            lambda: deciding.extend(self.service, request_id, actor, by)
        )
        view = result.view
        if isinstance(result.outcome, outcomes.Extended) and view is not None:
            notice = f"Deadline extended by {by}: now {view.expires_at:%Y-%m-%d %H:%M:%S} UTC."
            return self.console.redirect(request, posted.session, f"/requests/{request_id}", notice)
        error = sentence(result.message().removeprefix("Not recorded: "))
        status = result.refusal.status if result.refusal else 409
        return await self.again(request, posted, request_id, status, error)

    async def acknowledge(self, request: Request, request_id: str) -> Response:
        """The "I'm on it" button; done, it redirects to the request's page."""
        posted = await self.console.posted(request)
        if not isinstance(posted, Posted):
            return posted
        actor = Actor.of_approver(
            posted.me, "web", auth=posted.signed.auth, groups=posted.signed.groups
        )
        result = await anyio.to_thread.run_sync(
            lambda: acknowledging.acknowledge(self.service, request_id, actor)
        )
        if result.refusal is None and isinstance(result.outcome, Acknowledged):
            path = f"/requests/{request_id}"
            return self.console.redirect(request, posted.session, path, result.message())
        error = sentence(result.message().removeprefix("Not recorded: "))
        status = result.refusal.status if result.refusal else _result_status(result)
        return await self.again(request, posted, request_id, status, error)

    def show(self, request_id: str, request: Request) -> Response:
        """GET /requests/{id}: the page, for a signed-in approver."""
        session, signed = self.console.signed(request)
        if signed is None:
            return self.console.to_login(request)
        return self.detail(request, session, signed, request_id)

    def router(self) -> APIRouter:
        """The request page's routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/requests/{request_id}", self.show, methods=["GET"])

        @r.post("/requests/{request_id}/decide")
        async def decide(request_id: str, request: Request) -> Response:
            return await self.decide(request, request_id)

        @r.post("/requests/{request_id}/passkey")
        async def passkey(request_id: str, request: Request) -> Response:
            return await self.passkeys.challenge(request, request_id)

        @r.post("/requests/{request_id}/extend")
        async def extend(request_id: str, request: Request) -> Response:
            return await self.extend(request, request_id)

        @r.post("/requests/{request_id}/acknowledge")
        async def acknowledge(request_id: str, request: Request) -> Response:
            return await self.acknowledge(request, request_id)

        @r.get("/requests/{request_id}/decide")
        @r.get("/requests/{request_id}/extend")
        @r.get("/requests/{request_id}/acknowledge")
        def form_address(request_id: str) -> Response:
            # A form's address, bookmarked or copied from an error page, leads to its page.
            return RedirectResponse(f"/requests/{quote(request_id, safe='')}", status_code=303)

        return r


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
    # what the pipeline asks of an approval from this page (`acting.approval_refusal`): a
    # masked value it cannot reveal keeps it from approving; the others, once revealed
    masks = untrusted.masks(view.tool_args)
    can_approve = can_decide and not masks.unrevealable
    return {
        # gate's reading of the call leads the page; the agent's words come after it
        "call": calls.shown(view, whole=True),
        "approved_call": calls.shown(view, view.approved_args, whole=True)
        if view.approved_args is not None
        else None,
        "to_reveal": masks.to_reveal,
        "can_approve": can_approve,
        "can_edit": can_approve and view.offers.allow_edits,
        "edit_text": sticky.edit_text if sticky.edit_text is not None else editor_text(view),
        "comment": sticky.comment if sticky.verdict == "reject" else "",
        "approve_comment": sticky.comment if sticky.verdict == "approve" else "",
        "reject_reasons": list(view.offers.reject_reasons),
        "checked_reasons": sticky.reasons,
        "grant_scopes": forms.grant_scopes(view) if can_approve else [],
        "grant_durations": durations,
        "grant_uses": forms.grant_uses(view),
        "grant_pins": forms.grant_pins(view),
        "grant_default": "30m" if ("30m", "30 minutes") in durations else durations[-1][0],
        "can_extend": not view.is_final and refusal is None,
        "extend_choices": EXTEND_CHOICES,
        "source_grant": listing.grant(db, view.grant_id) if view.grant_id else None,
        "grants_made": listing.grants_from(db, view.id),
        "chain": queries.audit_chain(db, view.id),
        "outcome_summary": outcome_summary,
        "edits": edits,
    }


def editor_text(view: RequestView) -> str:
    """Arguments as the editor shows them: the page's pretty JSON, secrets masked (the
    decide handler puts masked values back, see `untrusted.unmask`)."""
    return untrusted.to_json(view.tool_args, indent=2)


def _result_status(result: Result) -> int:
    if result.refusal is not None:
        return result.refusal.status
    if isinstance(result.outcome, outcomes.Missing):
        return 404
    if isinstance(result.outcome, outcomes.AlreadyFinal | outcomes.AlreadyVoted):
        return 409
    return 200
