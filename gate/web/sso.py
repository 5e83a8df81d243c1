"""The single sign-on routes: leave for the identity provider, come back signed in.

`GET /login/sso` starts a sign-in: a random `state`, `nonce` and PKCE verifier go into this
browser's signed session cookie, and the browser goes to the provider. `GET
/login/sso/callback` takes them out again (once: a second visit finds none), checks that the
provider's `state` is this browser's, exchanges the code and checks the ID token
(`gate.identity.oidc`), finds the approver by the configured claim, and records the sign-in with how
it was made (issuer, subject, `auth_time`, `acr`) and the groups the provider conferred. The
nonce is consumed in the database (`web_sign_in.nonce`, unique): an ID token replayed with it
signs nobody in. Every failure is a page saying what failed, never a 500.

With `?request=<id>` (the request page's "sign in again" for a rule's step-up), gate asks
the provider for an authentication no older than the rule's `max_age` (`max_age`,
`prompt=login`; `acr_values` when the rule names classes) and checks `auth_time` in the new
token (RFC 9470).
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.exc import IntegrityError

from gate.config.settings import ApproverSettings
from gate.decisions import identities
from gate.identity.auth import new_csrf_token
from gate.identity.oidc import (
    PENDING_FOR,
    Asked,
    OidcClient,
    SignInRefused,
    Verified,
    find_approver,
    mapped_groups,
    who_claimed,
)
from gate.web.console import Console
from gate.web.login import safe_next
from gate.web.session import WebSession

log = logging.getLogger("gate.web")

CALLBACK_PATH = "/login/sso/callback"


class SsoPages:
    """Sign-in through the `[oidc]` provider."""

    def __init__(self, console: Console) -> None:
        self.console = console
        settings = console.settings
        assert settings.oidc is not None
        self.oidc = settings.oidc
        self.client = OidcClient(
            settings.oidc,
            redirect_uri=settings.server.base_url + CALLBACK_PATH,
            clock=console.state.clock,
        )

    async def start(self, request: Request) -> Response:
        """GET /login/sso: off to the provider, this browser's state, nonce and verifier kept."""
        session = self.console.codec.load(request)
        next_url = safe_next(request.query_params.get("next"))
        step_up = await self._step_up(request.query_params.get("request"))
        asked = Asked(
            nonce=secrets.token_urlsafe(32),
            code_verifier=secrets.token_urlsafe(48),
            max_age=step_up[0] if step_up else None,
            acr=step_up[1] if step_up else (),
        )
        state = secrets.token_urlsafe(32)
        try:
            url = await self.client.authorization_url(state, asked)
        except SignInRefused as exc:
            return self._refused(request, session, exc)
        session.sso = {
            "state": state,
            "nonce": asked.nonce,
            "verifier": asked.code_verifier,
            "max_age": asked.max_age,
            "acr": list(asked.acr),
            "next": next_url,
            "at": time.time(),
        }
        session.dirty = True
        response = RedirectResponse(url, status_code=303)
        self.console.codec.save(request, response, session)
        return response

    async def _step_up(self, request_id: str | None) -> tuple[int, tuple[str, ...]] | None:
        """(max_age seconds, acr) of a request's step-up, read from the request itself (never
        from the query), or None when it has none."""
        if not request_id or len(request_id) > 64:
            return None
        view = await anyio.to_thread.run_sync(self.console.service.view, request_id)
        step_up = view.offers.step_up if view is not None else None
        if step_up is None or step_up.max_age is None:  # a passkey alone: no sign-in asked
            return None
        return int(step_up.max_age.total_seconds()), step_up.acr

    async def callback(self, request: Request) -> Response:
        """GET /login/sso/callback: check everything, then sign the approver in."""
        console = self.console
        session = console.codec.load(request)
        pending, session.sso, session.dirty = session.sso, None, True  # one use only
        asked = _pending(pending, request.query_params.get("state"))
        if asked is None:
            refused = SignInRefused(
                "this sign-in was not started in this browser, was already used, or took "
                "longer than ten minutes; start again",
                status=400,
            )
            return self._refused(request, session, refused)
        params = request.query_params
        if params.get("error"):
            why = f"the identity provider refused the sign-in ({params.get('error', '')[:100]!r})"
            return self._refused(request, session, SignInRefused(why))
        code = params.get("code")
        if not code or len(code) > 4096:
            return self._refused(request, session, SignInRefused("no sign-in code came back"))
        try:
            verified = await self.client.sign_in(code, asked)
        except SignInRefused as exc:
            return self._refused(request, session, exc)
        approver = find_approver(console.settings, verified.claims)
        if approver is None:
            return self._unknown(request, session, verified)
        return await self._start(request, session, approver, verified, asked, pending or {})

    async def _start(
        self,
        request: Request,
        session: WebSession,
        approver: ApproverSettings,
        verified: Verified,
        asked: Asked,
        pending: dict[str, Any],
    ) -> Response:
        sign_ins, previous = self.console.sign_ins, session.sign_in
        groups = mapped_groups(self.oidc, verified.claims)
        service = self.console.service

        def start() -> str:
            if previous:
                sign_ins.revoke(previous)
            started = sign_ins.start(approver.name, verified.auth, groups=groups, nonce=asked.nonce)
            # the chat ids the provider vouches for (`[oidc] identity_claims`), once the
            # token has proved itself (a replayed one got no further than `start`)
            identities.bind_claims(
                service.settings, service.db, approver, verified.claims, service.clock()
            )
            return started

        try:
            sign_in = await anyio.to_thread.run_sync(start)
        except IntegrityError:
            refused = SignInRefused("this sign-in's nonce was used before (a replayed token)")
            return self._refused(request, session, refused)
        log.info("single sign-on: %s signed in (subject %s)", approver.name, verified.auth.subject)
        fresh = WebSession(csrf=new_csrf_token(), sign_in=sign_in, dirty=True)
        onward = RedirectResponse(safe_next(pending.get("next")), status_code=303)
        self.console.codec.save(request, onward, fresh)
        return onward

    def _refused(self, request: Request, session: WebSession, exc: SignInRefused) -> Response:
        log.warning("single sign-on refused: %s", exc.message)
        return self.console.error(
            request,
            session,
            None,
            exc.http_status,
            "Sign-in refused",
            "Not signed in: " + exc.message,
        )

    def _unknown(self, request: Request, session: WebSession, verified: Verified) -> Response:
        claim = self.oidc.approver_claim
        who = who_claimed(verified.claims, self.oidc)
        log.warning("single sign-on: %s %r matches no approver", claim, who)
        where = "email" if claim == "email" else 'oidc = "<subject>"'
        checked = (
            " (a verified one)" if claim == "email" and self.oidc.require_verified_email else ""
        )
        message = (
            f"The identity provider signed you in as {who}, but no [[approvers]] entry in "
            f"gate.toml has that {claim}{checked}: ask the gate administrator to add "
            f"{where} to your entry. You are not signed in to gate."
        )
        return self.console.error(request, session, None, 403, "Not an approver", message)

    def logout_url(self) -> str | None:
        """Where sign-out sends the browser: the provider's end_session_endpoint, when it
        advertises one, coming back to gate's sign-in page."""
        return self.client.logout_url(self.console.settings.server.base_url + "/login")

    def router(self) -> APIRouter:
        """The single sign-on routes (pages: not in the OpenAPI schema)."""
        r = APIRouter(include_in_schema=False)
        r.add_api_route("/login/sso", self.start, methods=["GET"])
        r.add_api_route(CALLBACK_PATH, self.callback, methods=["GET"])
        return r


def _pending(pending: dict[str, Any] | None, state: str | None) -> Asked | None:
    """What this browser asked, when the provider's `state` is its own and it is recent."""
    if pending is None or not state:
        return None
    mine, at = pending.get("state"), pending.get("at")
    if not isinstance(mine, str) or not isinstance(at, int | float):
        return None
    if not hmac.compare_digest(mine.encode(), state.encode("utf-8", "surrogatepass")):
        return None
    if time.time() - at > PENDING_FOR.total_seconds():
        return None
    nonce, verifier, max_age = pending.get("nonce"), pending.get("verifier"), pending.get("max_age")
    acr = pending.get("acr") or []
    if not isinstance(nonce, str) or not isinstance(verifier, str) or not isinstance(acr, list):
        return None
    return Asked(nonce, verifier, max_age if isinstance(max_age, int) else None, tuple(acr))
