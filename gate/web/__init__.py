"""The approver web console, mounted on the app by `install`.

`console` holds what every page shares (sign-in state, rendering, redirects); the pages live
by what they do: `pages` (queue, live events, history, stats), `request_page` (a request
and its decide and extend forms), `batch` (deciding several from the queue), `reveal` (a
masked value shown to an approver), `grants`, `agents` (tripped agents and their reset),
`webhooks_page` (webhook messages and their resend), `identities` (chat identities bound to
the signed-in approver), `login`, `sso` (single sign-on), `passkeys` (an approver's WebAuthn
credentials) and `passkey_approval` (an approval a passkey signs). Below them: `forms` (form
parsing), `queries` (read-only queries), `charts` (SVG), `session` (the cookie, security
headers), `signin` (rate limits, revocable sign-ins).

May import: gate.api, gate.base, gate.config, gate.decisions, gate.identity, gate.inputs,
gate.insights, gate.policy, gate.rendering, gate.server, gate.store, gate.text.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI
from starlette.staticfiles import StaticFiles

from gate.base.resources import resource_path
from gate.server.state import AppState
from gate.web.agents import AgentsPage
from gate.web.batch import BatchDecisions
from gate.web.console import Console
from gate.web.decisions_page import DecisionsPage
from gate.web.grants import GrantsPage
from gate.web.identities import IdentitiesPage
from gate.web.login import LoginPage
from gate.web.pages import Pages
from gate.web.passkeys import PasskeysPage
from gate.web.request_page import RequestPage
from gate.web.reveal import RevealRoute
from gate.web.sso import SsoPages
from gate.web.webhooks_page import WebhooksPage

log = logging.getLogger("gate.web")


def install(app: FastAPI, state: AppState) -> None:
    """Mount the console's pages and static files on `app` (the composition root adds the
    security headers, `gate.web.session.SECURITY_HEADERS`, to every response)."""
    console = Console(state)
    static = resource_path("templates") / "static"
    app.mount("/static", StaticFiles(directory=static), name="static")
    batch = BatchDecisions(console)  # before the request page: see `BatchDecisions.router`
    pages = (Pages(console), batch, RequestPage(console), RevealRoute(console), GrantsPage(console))
    sso = SsoPages(console) if state.settings.oidc is not None else None
    login = LoginPage(console, sso.logout_url if sso else None)
    for page in (
        *pages,
        DecisionsPage(console),
        AgentsPage(console),
        IdentitiesPage(console),
        login,
    ):
        app.include_router(page.router())
    if sso is not None:
        app.include_router(sso.router())
    if state.settings.webhooks:
        app.include_router(WebhooksPage(console).router())
    if console.passkeys_on:
        app.include_router(PasskeysPage(console).router())
    if state.settings.server.session_secret is None:
        log.info("web sessions are signed with a per-process key; set server.session_secret")
