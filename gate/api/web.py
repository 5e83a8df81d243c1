"""The approver web console: queue, request detail, history, stats, sign-in.

Server-rendered Jinja2 (autoescape on for every template), one small static script for the
live queue and countdowns, and a strict Content-Security-Policy. Every decision goes through
`GateService.decide`, so the web page follows exactly the API's rules on who may decide.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import date, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import anyio
import jinja2
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from markupsafe import Markup, escape
from starlette.datastructures import FormData
from starlette.staticfiles import StaticFiles

from gate import deciding, machine, untrusted
from gate.acting import Actor, Refusal, Result, refusal_for
from gate.auth import PasswordCheck, Principal, csrf_matches, new_csrf_token
from gate.channel import surface_name
from gate.config import ApproverSettings
from gate.errors import GateError, InvalidInput
from gate.models import Verdict
from gate.readmodel import RequestView
from gate.resources import resource_path
from gate.web import charts, queries
from gate.web.beyond import Beyond, detail_context, sentence
from gate.web.forms import MAX_COMMENT, DecideForm, FormError, parse_decide
from gate.web.session import (
    CSRF_FIELD,
    Flash,
    SecurityHeadersMiddleware,
    SessionCodec,
    WebSession,
    signed_in,
)
from gate.web.signin import MAX_PASSWORD, SignInLimiter, SignIns

if TYPE_CHECKING:
    from gate.app import AppState

log = logging.getLogger("gate.web")

QUEUE_LIMIT = 200
HISTORY_PAGE = 50
#: an SSE comment this often keeps proxies from closing an idle stream (most cut at 30-60 s)
KEEPALIVE_SECONDS = 15.0
CSRF_MESSAGE = (
    "This form was sent without a valid security token (CSRF), so nothing was done. "
    "Reload the page and try again."
)


def install(app: FastAPI, state: AppState) -> None:
    """Mount the console's pages, static files and security headers on `app`."""
    console = Console(state)
    app.add_middleware(SecurityHeadersMiddleware)
    static = resource_path("templates") / "static"
    app.mount("/static", StaticFiles(directory=static), name="static")
    app.include_router(console.router())
    app.include_router(Beyond(console).router())
    if state.settings.server.session_secret is None:
        log.info("web sessions are signed with a per-process key; set server.session_secret")


def environment(clock: Callable[[], datetime]) -> jinja2.Environment:
    """The Jinja2 environment: autoescape on for every template, whatever its name, and every
    printed string cleaned and masked by `gate.untrusted`, as on the chat cards."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(resource_path("templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=shown,
    )
    env.filters.update(
        ts=lambda dt: dt.strftime("%Y-%m-%d %H:%M:%S UTC") if dt else "",
        iso=lambda dt: dt.isoformat() if dt else "",
        ago=lambda dt: _span((clock() - dt).total_seconds()) + " ago",
        left=lambda dt: _left((dt - clock()).total_seconds()),
        # JSON is masked value by value (secret-named keys too), then escaped here: the
        # Markup result is not scanned again as one long string.
        pretty=lambda obj: escape(untrusted.to_json(obj, indent=2)),
        compact=lambda obj: escape(untrusted.to_json(obj)),
        masked_edits=untrusted.mask_diff,
        surface=surface_name,
    )
    return env


def shown(value: Any) -> Any:
    """What `{{ ... }}` prints: a string cleaned and masked (`untrusted.clean`) before
    autoescape. Markup (the JSON filters' output, our CSRF token) is ours and passes as is.

    Not capped: what templates print as plain text is bounded by the API's field limits or
    is our own JSON (the edit box), which a cap would cut into invalid JSON; the scan is
    linear either way.
    """
    if isinstance(value, str) and not isinstance(value, Markup):
        return untrusted.clean(value, limit=None)
    return value


def _span(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


def _left(seconds: float) -> str:
    return "deadline passed" if seconds <= 0 else _span(seconds) + " left"


class Console:
    """The pages, bound to one app's state."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.settings = state.settings
        self.service = state.service
        self.codec = SessionCodec(state.settings)
        self.env = environment(state.clock)
        self.sign_ins = SignIns(
            state.db,
            max_age_seconds=state.settings.server.session_max_age_seconds,
            clock=state.clock,
        )
        self.limiter = SignInLimiter()
        self.passwords = PasswordCheck(state.settings)

    # -- plumbing ---------------------------------------------------------------------------

    def who(self, request: Request) -> tuple[WebSession, ApproverSettings | None]:
        """The session and the signed-in approver, if any (reads the database: not async)."""
        session = self.codec.load(request)
        return session, signed_in(self.settings, request, session, self.sign_ins.approver_of)

    async def who_async(self, request: Request) -> tuple[WebSession, ApproverSettings | None]:
        """`who` from an async route, off the event loop."""
        return await anyio.to_thread.run_sync(self.who, request)

    def redirect(
        self, request: Request, session: WebSession, path: str, text: str, *, ok: bool = True
    ) -> Response:
        """POST/redirect/GET: 303 to `path`, which shows `text` once.

        A reload then repeats the GET, not the form, and the address bar holds a link that
        works when copied.
        """
        session.flash = Flash(path, text, ok)
        session.dirty = True
        response = RedirectResponse(quote(path), status_code=303)
        self.codec.save(request, response, session)
        return response

    def refusal(self, view: RequestView, me: ApproverSettings) -> str | None:
        """Why `me` may not act on `view` on this page (the pipeline's words), or None."""
        why = refusal_for(self.settings, view, Actor.of_approver(me, "web"))
        return why.sentence() if why else None

    @property
    def proxy_mode(self) -> bool:
        return bool(self.settings.server.trusted_user_header)

    def render(
        self,
        request: Request,
        session: WebSession,
        template: str,
        *,
        me: ApproverSettings | None,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        """Render `template` with the common context and save the session cookie."""
        html = self.env.get_template(template).render(
            me=me,
            csrf=Markup(session.csrf),  # random, ours: masking must never alter it
            csrf_field=CSRF_FIELD,
            path=request.url.path,
            proxy_mode=self.proxy_mode,
            **context,
        )
        response = HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})
        self.codec.save(request, response, session)
        return response

    def to_login(self, request: Request) -> Response:
        """Send a signed-out visitor to the sign-in page, coming back here afterwards."""
        if self.proxy_mode and request.headers.get(self.settings.server.trusted_user_header or ""):
            session = self.codec.load(request)
            return self.render(
                request,
                session,
                "error.html",
                me=None,
                status=403,
                title="Not an approver",
                message="Your proxy sign-in does not match any [[approvers]] entry in gate.toml.",
            )
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target)}", status_code=303)

    def refuse_csrf(self, request: Request, session: WebSession, me: Any) -> HTMLResponse:
        """403 for a form post without the session's CSRF token."""
        return self.render(
            request,
            session,
            "error.html",
            me=me,
            status=403,
            title="Form refused",
            message=CSRF_MESSAGE,
        )

    def error(
        self, request: Request, session: WebSession, me: Any, status: int, title: str, msg: str
    ) -> HTMLResponse:
        """An HTML error page."""
        return self.render(
            request, session, "error.html", me=me, status=status, title=title, message=msg
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

    # -- pages ------------------------------------------------------------------------------

    def queue_views(self, me: ApproverSettings) -> list[dict[str, Any]]:
        """Pending requests, newest first, each with whether `me` may decide it."""
        principal = Principal(me.name, "approver", me)
        views, _ = self.service.list(principal, status="pending", limit=QUEUE_LIMIT)
        rows = []
        for view in views:
            refusal = self.refusal(view, me)
            voted = any(v.approver == me.name for v in view.votes)
            rows.append({"view": view, "mine": refusal is None and not voted, "voted": voted})
        return rows

    def detail(
        self,
        request: Request,
        session: WebSession,
        me: ApproverSettings,
        request_id: str,
        *,
        status: int = 200,
        notice: str | None = None,
        error: str | None = None,
        form: DecideForm | None = None,
    ) -> HTMLResponse:
        """The request detail page, with the decide forms when `me` may decide."""
        if notice is None and error is None:
            flash = session.notice_for(request.url.path)
            if flash is not None:
                notice, error = (flash.text, None) if flash.ok else (None, flash.text)
        view = self.service.view(request_id, full=True)
        if view is None:
            return self.error(
                request, session, me, 404, "Not found", f"No request with id {request_id!r}."
            )
        my_vote = next((v for v in view.votes if v.approver == me.name), None)
        refusal = None
        if not view.is_final:
            refusal = self.refusal(view, me)
        can_decide = not view.is_final and refusal is None and my_vote is None
        return self.render(
            request,
            session,
            "detail.html",
            me=me,
            status=status,
            view=view,
            can_decide=can_decide,
            refusal=refusal,
            my_vote=my_vote,
            notice=notice,
            error=error,
            max_comment=MAX_COMMENT,
            **detail_context(self, view, can_decide=can_decide, refusal=refusal, form=form),
        )

    async def decide(self, request: Request, request_id: str) -> Response:
        """Handle the Approve, Approve with edits and Reject forms.

        A recorded decision redirects to the request's page (POST/redirect/GET); a form the
        page must show again (bad JSON, a missing reason, a refusal) is answered in place
        with its status.
        """
        session, me = await self.who_async(request)
        form = await request.form()
        if not csrf_matches(session.csrf, _field(form, CSRF_FIELD)):
            return self.refuse_csrf(request, session, me)
        if me is None:
            return self.to_login(request)
        try:
            parsed = parse_decide(form)
        except FormError as exc:
            error, status, sticky = exc.message, exc.http_status, exc.form
            return await anyio.to_thread.run_sync(
                lambda: self.detail(
                    request, session, me, request_id, status=status, error=error, form=sticky
                )
            )
        actor = Actor.of_approver(me, "web")
        try:
            edited = self.unmasked(request_id, parsed.edited_args)
        except GateError as exc:  # an edit around a masked value
            error, status = sentence(exc.message), exc.status
            return await anyio.to_thread.run_sync(
                lambda: self.detail(
                    request, session, me, request_id, status=status, error=error, form=parsed
                )
            )
        result = await anyio.to_thread.run_sync(
            lambda: deciding.decide(
                self.service,
                request_id,
                actor,
                Verdict(parsed.verdict),
                parsed.comment or None,
                edited_args=edited,
                reasons=parsed.reasons or (),
                grant=parsed.grant,
            )
        )
        if result.refusal is Refusal.not_offered:  # the rule offers no such edit, reason, grant
            error = sentence(result.detail or result.message())
            return await anyio.to_thread.run_sync(
                lambda: self.detail(
                    request, session, me, request_id, status=422, error=error, form=parsed
                )
            )
        status = _result_status(result)
        message = result.message()
        if status == 200:
            if result.view is not None and result.view.approved_args is not None:
                message += " The call runs with your edited arguments."
            return self.redirect(request, session, f"/requests/{request_id}", message)
        return await anyio.to_thread.run_sync(
            lambda: self.detail(
                request,
                session,
                me,
                request_id,
                status=status,
                error=message,
            )
        )

    async def events(self, request: Request) -> Response:
        """Server-sent events: one message per created / changed / final request."""
        _, me = await self.who_async(request)
        if me is None:
            return Response("sign in first", status_code=401, media_type="text/plain")
        return StreamingResponse(
            self._event_stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _event_stream(self) -> AsyncIterator[str]:
        inbox: asyncio.Queue[Any] = asyncio.Queue()

        async def pump() -> None:
            async for event in self.state.notifier.stream():
                inbox.put_nowait(event)
            inbox.put_nowait(None)

        task = asyncio.create_task(pump())
        await asyncio.sleep(0)  # let the pump subscribe before the page learns it is live
        try:
            yield "retry: 2000\n: connected\n\n"
            while True:
                try:
                    event = await asyncio.wait_for(inbox.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if event is None:
                    return
                data = json.dumps({"id": event.request_id, "kind": event.kind})
                yield f"event: {event.kind}\ndata: {data}\n\n"
        finally:
            task.cancel()

    def history(self, request: Request) -> Response:
        """Finished requests with filters and paging."""
        session, me = self.who(request)
        if me is None:
            return self.to_login(request)
        try:
            filters = parse_filters(request)
        except ValueError as exc:
            return self.error(request, session, me, 400, "Bad filter", str(exc))
        cursor = request.query_params.get("cursor") or None
        raw_limit = request.query_params.get("limit", "")
        limit = (
            int(raw_limit) if raw_limit.isdigit() and 0 < int(raw_limit) <= 500 else HISTORY_PAGE
        )
        rows, next_cursor = queries.history_page(self.state.db, filters, limit=limit, cursor=cursor)
        args = filters.query_args()
        if limit != HISTORY_PAGE:
            args["limit"] = str(limit)
        return self.render(
            request,
            session,
            "history.html",
            me=me,
            rows=rows,
            filters=filters,
            statuses=queries.FINAL_STATUSES,
            known=queries.distinct_values(self.state.db),
            approvers=[a.name for a in self.settings.approvers],
            next_url=f"/history?{urlencode({**args, 'cursor': next_cursor})}"
            if next_cursor
            else None,
            first_url=f"/history?{urlencode(args)}" if cursor else None,
            export_query=urlencode(args),
        )

    def export(self, request: Request, fmt: str) -> Response:
        """The filtered audit trail as CSV or JSON lines."""
        _, me = self.who(request)
        if me is None:
            return Response("sign in first", status_code=401, media_type="text/plain")
        try:
            filters = parse_filters(request)
        except ValueError as exc:
            return Response(str(exc), status_code=400, media_type="text/plain")
        rows = queries.audit_rows(self.state.db, filters)
        stamp = self.state.clock().strftime("%Y%m%d-%H%M%S")
        if fmt == "csv":
            body, media = queries.to_csv(rows), "text/csv; charset=utf-8"
        else:
            body, media = queries.to_jsonl(rows), "application/x-ndjson"
        name = f"gate-audit-{stamp}.{'csv' if fmt == 'csv' else 'jsonl'}"
        return StreamingResponse(
            body,
            media_type=media,
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    def stats(self, request: Request) -> Response:
        """Charts an operator would rather look at than read, with their numbers."""
        session, me = self.who(request)
        if me is None:
            return self.to_login(request)
        raw = request.query_params.get("days", "14")
        days = int(raw) if raw in ("7", "14", "30") else 14
        data = queries.stats(self.state.db, now=self.state.clock(), days=days)
        outcomes = ["approved", "rejected", "expired", "cancelled", "pending"]
        return self.render(
            request,
            session,
            "stats.html",
            me=me,
            data=data,
            outcomes=outcomes,
            rule_rows=[[rule, *(c.get(o, 0) for o in outcomes)] for rule, c in data.by_rule],
            approver_rows=[
                [name, c.get("approve", 0), c.get("reject", 0)] for name, c in data.by_approver
            ],
            median=_span(data.median_seconds) if data.median_seconds is not None else None,
            charts={
                "times": charts.columns(data.decision_times, title="Time to decision"),
                "rules": charts.stacked_bars(data.by_rule, outcomes, title="Outcomes by rule"),
                "approvers": charts.stacked_bars(
                    data.by_approver, ["approve", "reject"], title="Votes by approver"
                ),
                "backlog": charts.columns(
                    data.backlog, title="Pending at the end of each day", series="pending"
                ),
                "expiries": charts.columns(
                    data.expiries, title="Expiries per day", series="expired"
                ),
            },
        )

    # -- sign-in ----------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        """Check the username and password form against [[approvers]] password_hash.

        Rate-limited per client address and per name, checked on the sign-in threads (never
        the API's), and recorded as a `web_sign_in` row that sign-out revokes.
        """
        session, me = await self.who_async(request)
        form = await request.form()
        next_url = _safe_next(_field(form, "next"))
        if not csrf_matches(session.csrf, _field(form, CSRF_FIELD)):
            return self.refuse_csrf(request, session, me)
        username = (_field(form, "username") or "").strip()
        password = _field(form, "password") or ""

        def again(status: int, error: str, headers: dict[str, str] | None = None) -> Response:
            response = self.render(
                request,
                session,
                "login.html",
                me=None,
                status=status,
                error=error,
                username=username,
                next=next_url,
            )
            response.headers.update(headers or {})
            return response

        approver = None
        if username and password and len(password) <= MAX_PASSWORD:
            client = request.client.host if request.client else "unknown"
            wait = self.limiter.admit(client, username)
            if wait:
                log.warning("web sign-in rate-limited for %r from %s", username[:100], client)
                return again(
                    429,
                    f"Too many sign-in attempts. Try again in {wait} seconds.",
                    {"Retry-After": str(wait)},
                )
            if self.limiter.busy:
                return again(503, "Sign-in is busy. Try again in a moment.", {"Retry-After": "1"})
            approver = await anyio.to_thread.run_sync(
                self.passwords, username, password, limiter=self.limiter.pool
            )
            if approver is not None:
                self.limiter.succeeded(client, username)
        if approver is None:
            log.info("web sign-in failed for %r", username[:100])
            return again(401, "Wrong username or password.")
        name = approver.name
        previous = session.sign_in

        def start() -> str:
            if previous:
                self.sign_ins.revoke(previous)
            return self.sign_ins.start(name)

        # A fresh CSRF token and sign-in id, so neither planted before it is worth anything.
        fresh = WebSession(
            csrf=new_csrf_token(), sign_in=await anyio.to_thread.run_sync(start), dirty=True
        )
        response = RedirectResponse(next_url, status_code=303)
        self.codec.save(request, response, fresh)
        return response

    async def logout(self, request: Request) -> Response:
        """End the sign-in in the database (a replayed cookie is refused), then the cookie."""
        session, me = await self.who_async(request)
        form = await request.form()
        if not csrf_matches(session.csrf, _field(form, CSRF_FIELD)):
            return self.refuse_csrf(request, session, me)
        if session.sign_in:
            await anyio.to_thread.run_sync(self.sign_ins.revoke, session.sign_in)
        response = RedirectResponse("/login", status_code=303)
        self.codec.clear(request, response)
        return response

    def router(self) -> APIRouter:
        """The console's routes (kept out of the OpenAPI schema: they are pages)."""
        r = APIRouter(include_in_schema=False)

        @r.get("/")
        def queue(request: Request) -> Response:
            session, me = self.who(request)
            if me is None:
                return self.to_login(request)
            return self.render(request, session, "queue.html", me=me, rows=self.queue_views(me))

        @r.get("/queue/rows")
        def queue_rows(request: Request) -> Response:
            session, me = self.who(request)
            if me is None:
                return Response("sign in first", status_code=401, media_type="text/plain")
            rows = self.queue_views(me)
            return self.render(request, session, "_queue_rows.html", me=me, rows=rows)

        @r.get("/events")
        async def events(request: Request) -> Response:
            return await self.events(request)

        @r.get("/requests/{request_id}")
        def detail(request_id: str, request: Request) -> Response:
            session, me = self.who(request)
            if me is None:
                return self.to_login(request)
            return self.detail(request, session, me, request_id)

        @r.post("/requests/{request_id}/decide")
        async def decide(request_id: str, request: Request) -> Response:
            return await self.decide(request, request_id)

        @r.get("/requests/{request_id}/decide")
        @r.get("/requests/{request_id}/extend")
        def form_address(request_id: str) -> Response:
            # A form's address, bookmarked or copied from an error page, leads to its page.
            return RedirectResponse(f"/requests/{quote(request_id, safe='')}", status_code=303)

        @r.get("/history")
        def history(request: Request) -> Response:
            return self.history(request)

        @r.get("/history/export.csv")
        def export_csv(request: Request) -> Response:
            return self.export(request, "csv")

        @r.get("/history/export.jsonl")
        def export_jsonl(request: Request) -> Response:
            return self.export(request, "jsonl")

        @r.get("/stats")
        def stats(request: Request) -> Response:
            return self.stats(request)

        @r.get("/login")
        def login_form(request: Request) -> Response:
            session, me = self.who(request)
            next_url = _safe_next(request.query_params.get("next"))
            if me is not None:
                return RedirectResponse(next_url, status_code=303)
            return self.render(
                request, session, "login.html", me=None, error=None, username="", next=next_url
            )

        @r.post("/login")
        async def login(request: Request) -> Response:
            return await self.login(request)

        @r.post("/logout")
        async def logout(request: Request) -> Response:
            return await self.logout(request)

        return r


def _field(form: FormData, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


def _safe_next(value: str | None) -> str:
    """Only same-site paths ("/requests/x"), never "//evil.example" or an absolute URL."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    return value


def _result_status(result: Result) -> int:
    if result.refusal is not None:
        return result.refusal.status
    if isinstance(result.outcome, machine.Missing):
        return 404
    if isinstance(result.outcome, machine.AlreadyFinal | machine.AlreadyVoted):
        return 409
    return 200


def parse_filters(request: Request) -> queries.HistoryFilter:
    """History filters from the query string; ValueError names the bad one."""
    params = request.query_params

    def text(name: str) -> str | None:
        value = (params.get(name) or "").strip()
        if len(value) > 200:
            raise ValueError(f"{name} is longer than 200 characters")
        return value or None

    def day(name: str) -> date | None:
        value = text(name)
        if value is None:
            return None
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{name} must be a date like 2026-01-31, not {value!r}") from None

    status = text("status")
    if status and status not in queries.FINAL_STATUSES:
        raise ValueError(f"status must be one of {', '.join(queries.FINAL_STATUSES)}")
    return queries.HistoryFilter(
        status=status,
        tool=text("tool"),
        agent=text("agent"),
        approver=text("approver"),
        since=day("since"),
        until=day("until"),
    )
