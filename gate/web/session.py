"""Web sessions: a signed cookie holding the signed-in approver and the CSRF token.

The cookie is signed (itsdangerous, with a timestamp) but not encrypted: it carries only a
name and a random token. Nothing about a session lives on the server, so any replica that
shares `session_secret` accepts it.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gate.auth import local_web_user, new_csrf_token
from gate.config import ApproverSettings, Settings

log = logging.getLogger("gate.web")

COOKIE_NAME = "gate_session"
CSRF_FIELD = "csrf_token"

#: no inline script or style anywhere, nothing from another origin, never framed
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


@dataclass
class WebSession:
    """What the cookie says: who is signed in (if anyone) and the CSRF token."""

    csrf: str
    user: str | None = None
    dirty: bool = False


class SessionCodec:
    """Signs and reads the session cookie."""

    def __init__(self, settings: Settings) -> None:
        server = settings.server
        secret = server.session_secret.get_secret_value() if server.session_secret else None
        if secret is None:
            # Sessions then end on restart and are not shared between replicas.
            secret = secrets.token_urlsafe(32)
        self._serializer = URLSafeTimedSerializer(secret, salt="gate.web.session")
        self.max_age = server.session_max_age_seconds
        self.https_public = server.base_url.startswith("https://")

    def load(self, request: Request) -> WebSession:
        """The request's session, or a fresh anonymous one."""
        raw = request.cookies.get(COOKIE_NAME)
        if raw:
            try:
                data: Any = self._serializer.loads(raw, max_age=self.max_age)
            except BadSignature:
                data = None
            if isinstance(data, dict) and isinstance(data.get("csrf"), str):
                user = data.get("user")
                return WebSession(csrf=data["csrf"], user=user if isinstance(user, str) else None)
        return WebSession(csrf=new_csrf_token(), dirty=True)

    def save(self, request: Request, response: Response, session: WebSession) -> None:
        """Write the cookie when the session is new or changed."""
        if not session.dirty:
            return
        value = self._serializer.dumps({"csrf": session.csrf, "user": session.user})
        response.set_cookie(
            COOKIE_NAME,
            value,
            max_age=self.max_age,
            path="/",
            httponly=True,
            samesite="lax",
            secure=self.https_public or request.url.scheme == "https",
        )

    def clear(self, request: Request, response: Response) -> None:
        """Sign out: forget the cookie."""
        response.delete_cookie(
            COOKIE_NAME,
            path="/",
            httponly=True,
            samesite="lax",
            secure=self.https_public or request.url.scheme == "https",
        )


def signed_in(settings: Settings, request: Request, session: WebSession) -> ApproverSettings | None:
    """The approver behind this request: the trusted proxy header, else the session."""
    header = settings.server.trusted_user_header
    if header:
        value = request.headers.get(header)
        if value:
            value = value.strip()
            return settings.approver(value) or next(
                (a for a in settings.approvers if a.email and a.email == value), None
            )
    if session.user:
        return settings.approver(session.user)
    return local_web_user(settings)


class SecurityHeadersMiddleware:
    """Add the CSP and anti-framing headers to every page the console serves."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in SECURITY_HEADERS if h[0] not in present)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
