"""The sign-in and sign-out pages (password sign-in; behind a trusted proxy there is none).

Attempts are rate-limited per client address and per name, in buckets every replica shares,
and checked on the sign-in threads, never the API's (`gate.web.signin`); a success is
recorded as a `web_sign_in` row that sign-out revokes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from gate.config.settings import ApproverSettings
from gate.identity.auth import PasswordCheck, csrf_matches, new_csrf_token
from gate.web.console import Console
from gate.web.forms import field_of
from gate.web.session import CSRF_FIELD, WebSession
from gate.web.signin import MAX_PASSWORD, SignInLimiter

log = logging.getLogger("gate.web")


@dataclass
class Refused:
    """A sign-in attempt turned away: the status and sentence the form shows again."""

    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)


def safe_next(value: str | None) -> str:
    """Only same-site paths ("/requests/x"), never "//evil.example" or an absolute URL."""
    if not value or not value.startswith("/") or value.startswith(("//", "/\\")):
        return "/"
    return value


class LoginPage:
    """The sign-in form, its check, and sign-out.

    `provider_logout` gives the identity provider's sign-out address (single sign-on with an
    `end_session_endpoint`): signing out of a single sign-on goes there too, or the next
    "sign in" would sign the same person straight back in."""

    def __init__(
        self, console: Console, provider_logout: Callable[[], str | None] | None = None
    ) -> None:
        self.console = console
        self.provider_logout = provider_logout
        self.limiter = SignInLimiter(console.sign_ins.db, console.sign_ins.clock)
        self.passwords = PasswordCheck(console.settings)

    def form(self, request: Request) -> Response:
        """GET /login: the form, or straight on for someone already signed in."""
        session, me = self.console.who(request)
        next_url = safe_next(request.query_params.get("next"))
        if me is not None:
            return RedirectResponse(next_url, status_code=303)
        return self.console.render(
            request, session, "login.html", me=None, error=None, username="", next=next_url
        )

    async def login(self, request: Request) -> Response:
        """Check the username and password form against [[approvers]] password_hash."""
        console = self.console
        session, me = await console.who_async(request)
        form = await request.form()
        next_url = safe_next(field_of(form, "next"))
        if not csrf_matches(session.csrf, field_of(form, CSRF_FIELD)):
            return console.refuse_csrf(request, session, me)
        username = (field_of(form, "username") or "").strip()
        checked = await self.check(request, username, field_of(form, "password") or "")
        if isinstance(checked, Refused):
            response = console.render(
                request,
                session,
                "login.html",
                me=None,
                status=checked.status,
                error=checked.message,
                username=username,
                next=next_url,
            )
            response.headers.update(checked.headers)
            return response
        previous, name = session.sign_in, checked.name

        def start() -> str:
            if previous:
                self.console.sign_ins.revoke(previous)
            return self.console.sign_ins.start(name)

        # A fresh CSRF token and sign-in id, so neither planted before it is worth anything.
        fresh = WebSession(
            csrf=new_csrf_token(), sign_in=await anyio.to_thread.run_sync(start), dirty=True
        )
        onward = RedirectResponse(next_url, status_code=303)
        console.codec.save(request, onward, fresh)
        return onward

    async def check(
        self, request: Request, username: str, password: str
    ) -> ApproverSettings | Refused:
        """The approver these credentials sign in, within the rate limits, or why not."""
        if not (username and password and len(password) <= MAX_PASSWORD):
            log.info("web sign-in failed for %r", username[:100])
            return Refused(401, "Wrong username or password.")
        client = request.client.host if request.client else "unknown"
        wait = await anyio.to_thread.run_sync(self.limiter.admit, client, username)
        if wait:
            log.warning("web sign-in rate-limited for %r from %s", username[:100], client)
            message = f"Too many sign-in attempts. Try again in {wait} seconds."
            return Refused(429, message, {"Retry-After": str(wait)})
        if self.limiter.busy:
            return Refused(503, "Sign-in is busy. Try again in a moment.", {"Retry-After": "1"})
        approver = await anyio.to_thread.run_sync(
            self.passwords, username, password, limiter=self.limiter.pool
        )
        if approver is None:
            log.info("web sign-in failed for %r", username[:100])
            return Refused(401, "Wrong username or password.")
        await anyio.to_thread.run_sync(self.limiter.succeeded, client, username)
        return approver

    async def logout(self, request: Request) -> Response:
        """End the sign-in in the database (a replayed cookie is refused), then the cookie."""
        console = self.console
        session, signed = await anyio.to_thread.run_sync(console.signed, request)
        form = await request.form()
        if not csrf_matches(session.csrf, field_of(form, CSRF_FIELD)):
            return console.refuse_csrf(request, session, signed.approver if signed else None)
        if session.sign_in:
            await anyio.to_thread.run_sync(console.sign_ins.revoke, session.sign_in)
        at_provider = None
        if signed is not None and signed.auth.kind == "oidc" and self.provider_logout:
            at_provider = self.provider_logout()
        response: Response = RedirectResponse("/login", status_code=303)
        if at_provider is not None:
            # A page that moves on, not a redirect: the pages' CSP (`form-action 'self'`)
            # stops a form's redirect to another origin, the provider's sign-out.
            signed_out = WebSession(csrf=new_csrf_token())
            response = console.render(
                request, signed_out, "signed_out.html", me=None, provider_url=at_provider
            )
        console.codec.clear(request, response)
        return response

    def router(self) -> APIRouter:
        """The sign-in routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/login", self.form, methods=["GET"])
        r.add_api_route("/login", self.login, methods=["POST"])
        r.add_api_route("/logout", self.logout, methods=["POST"])
        return r
