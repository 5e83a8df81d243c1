"""`GET /channels/email/confirm` shows the request; `POST` to the same address decides.

The link token is checked first, from the URL, before the body is read: a token that is
missing, forged, tampered with or too old is a 401 (a page for a browser, gate's JSON error
otherwise) and nothing else happens. The token names the approver and the request; the form
names neither, so a link can only ever act as its approver on its request. A POST also needs
the page's form token (CSRF, tied to the link token) and, when the browser says where it
comes from, gate's own origin. A GET never decides: mail scanners and link previews open
links, and only ever see the page.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import anyio
from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from channels import decisions, edits
from channels.email import page
from channels.email.links import BadLink, Link, Links
from channels.email.message import EDIT_CHARS
from channels.email.text import inert
from channels.inbound import deadline_from_iso
from gate.base.errors import Forbidden, Unauthenticated
from gate.decisions.readmodel import RequestView
from gate.delivery.channel import Action, ChannelContext, Click

log = logging.getLogger("gate.channels.email")

#: the longest reason kept from the box (the box itself allows as much)
MAX_COMMENT = 500
NEED_A_REASON = "Type a reason (or tick a preset one), then press Reject: the agent is told why."
STALE_FORM = (
    "This form is out of date or was not sent from gate's page, so nothing was done. "
    "Open the link in the mail again."
)
#: every answer: never cached, never indexed, the token-bearing URL never sent on
HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex, nofollow",
}


class ConfirmPages:
    """The confirm page and its form, for links signed by `links`."""

    def __init__(
        self,
        name: str,
        gate: ChannelContext,
        links: Links,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.gate = gate
        self.links = links
        self._clock = clock

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    @property
    def base_url(self) -> str:
        """Where gate is reached: the links and forms point here only."""
        return self.gate.settings.server.base_url

    async def show(self, request: Request) -> Response:
        """GET: the request and the form for the link's action; nothing is decided."""
        token = request.query_params.get("t")
        link = self._checked(request, token)
        if not isinstance(link, Link):
            return link
        assert token is not None
        do = request.query_params.get("do", "approve")
        why, view = await decisions.refusal(self.gate, self.name, link.request_id, link.address)
        if why is None and view is not None:
            why = self._voted(view, link)
        if why is not None or view is None:
            return await self._page(
                "Nothing to do here", view, link, notice=why or "This request no longer exists."
            )
        form, notice = page.build_form(view, do, token=token, csrf=self.links.form_token(token))
        return await self._page("Review this request", view, link, notice=notice, form=form)

    async def decide(self, request: Request) -> Response:
        """POST: check the link, the origin and the form token, then hand the click to gate."""
        token = request.query_params.get("t")
        link = self._checked(request, token)  # before a byte of the body is read
        if not isinstance(link, Link):
            return link
        assert token is not None
        if not self._same_origin(request):
            return self._refuse(request, Forbidden(STALE_FORM, code="cross_site_request"))
        body = await request.form()
        values = {k: v for k, v in body.multi_items() if isinstance(v, str)}
        picked = [v for v in body.getlist("reasons") if isinstance(v, str)]
        if not self.links.form_ok(token, values.get("csrf")):
            return self._refuse(request, Forbidden(STALE_FORM, code="csrf_failed"))
        do = request.query_params.get("do", "approve")
        view = await self.gate.view(link.request_id)
        if view is None:
            notice = "This request no longer exists."
            return await self._page("Nothing to do here", None, link, notice=notice)
        click = self._click(link, do, values, picked, view)
        if isinstance(click, str | dict):
            errors = click if isinstance(click, dict) else {}
            named = "; ".join(f"{inert(k, 40)}: {why}" for k, why in errors.items())
            notice = f"Not recorded: {named}" if errors else str(click)
            form, _ = page.build_form(
                view, do, token=token,
                csrf=self.links.form_token(token), typed=values, errors=errors,
            )  # fmt: skip
            return await self._page(
                "Review this request", view, link, notice=notice, form=form, status=422,
                kind="error",
            )  # fmt: skip
        result = await self.gate.act(click)
        if click.action == "extend":
            message = decisions.extend_message(result, self._now())
        else:
            message = result.message()
        kind = "ok" if result.changed else "error"
        return await self._page("Done" if result.changed else "Not recorded", result.view,
                                link, notice=message, kind=kind)  # fmt: skip

    def _click(
        self,
        link: Link,
        do: str,
        values: Mapping[str, str],
        picked: list[str],
        view: RequestView,
    ) -> Click | str | dict[str, str]:
        """The click a submitted form means, or why it cannot be read (a sentence, or edit
        errors by argument name)."""
        base = Click(self.name, link.address, link.request_id, "approve")
        if view.is_final:  # whatever the form says, gate answers who decided, and when
            action: Action = (
                "reject" if do == "reject" else "extend" if do == "extend" else "approve"
            )
            return Click(self.name, link.address, link.request_id, action)
        if do == "approve":
            return base
        if do == "acknowledge":  # "I'm on it": the pipeline says if they may, and if first
            return Click(self.name, link.address, link.request_id, "acknowledge")
        if do == "grant":
            try:
                grant = decisions.parse_grant(values.get("grant", ""))
            except ValueError as exc:
                return f"Not recorded: {exc}."
            return Click(self.name, link.address, link.request_id, "approve", grant=grant)
        if do == "extend":
            return Click(
                self.name, link.address, link.request_id, "extend",
                extend_by=decisions.EXTEND_BY, extend_from=_when(values.get("shown")),
            )  # fmt: skip
        if do == "reject":
            comment = inert_comment(values.get("reason", ""))
            try:
                reasons = decisions.reasons_from(view, picked)
            except ValueError as exc:
                return f"Not recorded: {exc}."
            if not comment and not reasons:
                return NEED_A_REASON
            return Click(
                self.name, link.address, link.request_id, "reject", comment or None,
                reasons=tuple(reasons),
            )  # fmt: skip
        if do == "edit":
            return _edit_click(base, values, view)
        return f"Not recorded: {inert(do, 40)!r} is not something a link can do."

    def _voted(self, view: RequestView, link: Link) -> str | None:
        """ "You already voted" when this link's approver has (a used link shows no form)."""
        person = self.gate.settings.approver_by_identity(self.name, link.address)
        vote = next((v for v in view.votes if person and v.approver == person.name), None)
        if vote is None:
            return None
        return f"You already voted to {vote.verdict} this request ({vote.at:%Y-%m-%d %H:%M} UTC)."

    def _checked(self, request: Request, token: str | None) -> Link | Response:
        try:
            return self.links.check(token)
        except BadLink as exc:
            return self._refuse(request, Unauthenticated(str(exc), code="bad_email_link"))

    def _refuse(self, request: Request, error: Unauthenticated | Forbidden) -> Response:
        """gate's JSON error for a program; a page saying the same for a browser."""
        if "text/html" in request.headers.get("accept", ""):
            html = page.render(title="This link does not work", view=None, now=self._now(),
                               notice=error.message, notice_kind="error")  # fmt: skip
            return HTMLResponse(html, status_code=error.status, headers=HEADERS)
        return JSONResponse(error.body(), status_code=error.status, headers=HEADERS)

    def _same_origin(self, request: Request) -> bool:
        """Whether the browser says the form came from gate's own page (a program that says
        nothing passes: the link and form tokens still have to match).

        `Origin` must be gate's public address or the one this request was sent to. The page
        sends no referrer, so Chromium sends `Origin: null` for its own form: then
        `Sec-Fetch-Site` (which a page cannot set) must say same-origin.
        """
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            own = {self.base_url.rstrip("/"), f"{request.url.scheme}://{request.url.netloc}"}
            return origin.rstrip("/") in own
        site = request.headers.get("sec-fetch-site")
        if site is not None:
            return site == "same-origin"
        return origin is None

    async def _page(
        self,
        title: str,
        view: RequestView | None,
        link: Link,
        *,
        notice: str | None = None,
        form: page.Form | None = None,
        status: int = 200,
        kind: str = "info",
    ) -> HTMLResponse:
        # Rendering scans untrusted text: off the event loop.
        html = await anyio.to_thread.run_sync(
            lambda: page.render(
                title=title,
                view=view,
                now=self._now(),
                address=link.address,
                notice=notice,
                notice_kind=kind,
                form=form,
            )  # fmt: skip
        )
        return HTMLResponse(html, status_code=status, headers=HEADERS)


def inert_comment(text: str) -> str:
    """A typed reason, cut to size and stripped (gate cleans it again where it shows it)."""
    return text.strip()[:MAX_COMMENT].strip()


def _when(text: str | None) -> datetime | None:
    """The deadline the page showed, if it reads as one (an unreadable one moves nothing
    twice: gate then extends from the deadline as it is)."""
    if not text:
        return None
    try:
        return deadline_from_iso(text)
    except ValueError:
        return None


def _edit_click(
    base: Click, values: Mapping[str, str], view: RequestView
) -> Click | str | dict[str, str]:
    """An "Edit and approve" form: each box's text parsed back into its argument."""
    fields = edits.editable_fields(view, max_chars=EDIT_CHARS)
    if not fields:
        return "Not recorded: nothing here can be edited by email; edit it in gate."
    texts = {f.key: values[f"e{i}"] for i, f in enumerate(fields) if f"e{i}" in values}
    edited, errors = edits.apply_edits(view, fields, texts)
    if errors:
        return dict(errors)
    changed = {key: edited[key] for key in texts if edited[key] != view.tool_args[key]}
    return Click(base.channel, base.user_id, base.request_id, "approve", edits=changed or None)
