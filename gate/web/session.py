"""Web sessions: a signed cookie holding the CSRF token, the sign-in id and a one-shot notice.

The cookie is signed (itsdangerous, with a timestamp) but not encrypted: it carries only
random tokens and a sentence gate wrote. Who is signed in lives in the database
(`gate.web.signin.SignIns`), so sign-out is final on every replica that shares
`session_secret` and the database.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from gate.base.logs import note_principal
from gate.config.settings import ApproverSettings, Settings
from gate.identity.auth import local_web_user, new_csrf_token
from gate.identity.authmethod import LOCAL, PROXY, AuthMethod

log = logging.getLogger("gate.web")

COOKIE_NAME = "gate_session"
CSRF_FIELD = "csrf_token"


@dataclass
class Flash:
    """A notice for the page a form redirected to (POST/redirect/GET), shown once."""

    path: str
    text: str
    ok: bool = True


@dataclass
class WebSession:
    """What the cookie says: the CSRF token, the sign-in (if any) and a pending notice."""

    csrf: str
    #: the random id of a `web_sign_in` row (password sign-in only)
    sign_in: str | None = None
    flash: Flash | None = None
    dirty: bool = False
    #: a single sign-on under way in this browser (`gate.web.sso`): its state, nonce, PKCE
    #: verifier and where to go after; taken out when the provider sends the browser back
    sso: dict[str, Any] | None = None

    def notice_for(self, path: str) -> Flash | None:
        """The notice waiting for `path`, taken out of the session (shown once)."""
        flash = self.flash
        if flash is None or flash.path != path:
            return None
        self.flash = None
        self.dirty = True
        return flash


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
                sign_in, sso = data.get("sid"), data.get("sso")
                return WebSession(
                    csrf=data["csrf"],
                    sign_in=sign_in if isinstance(sign_in, str) else None,
                    flash=_flash(data.get("flash")),
                    sso=sso if isinstance(sso, dict) else None,
                )
        return WebSession(csrf=new_csrf_token(), dirty=True)

    def save(self, request: Request, response: Response, session: WebSession) -> None:
        """Write the cookie when the session is new or changed."""
        if not session.dirty:
            return
        data: dict[str, Any] = {"csrf": session.csrf, "sid": session.sign_in}
        if session.flash is not None:
            flash = session.flash
            data["flash"] = {"path": flash.path, "text": flash.text, "ok": flash.ok}
        if session.sso is not None:
            data["sso"] = session.sso
        value = self._serializer.dumps(data)
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


def _flash(value: Any) -> Flash | None:
    if not isinstance(value, dict):
        return None
    path, text, ok = value.get("path"), value.get("text"), value.get("ok")
    if isinstance(path, str) and isinstance(text, str) and isinstance(ok, bool):
        return Flash(path, text, ok)
    return None


#: the header a sign-in proxy proves itself with: `[server].trusted_proxy_secret`
PROXY_SECRET_HEADER = "X-Gate-Proxy-Secret"


def proxy_user(settings: Settings, request: Request) -> str | None:
    """The user `trusted_user_header` names, or None. It counts only on a request that also
    carries the proxy's secret: any process that can reach gate (an agent on the same host,
    say) can send any header, and gate cannot tell the proxy by its address."""
    server = settings.server
    header, secret = server.trusted_user_header, server.trusted_proxy_secret
    if not header or secret is None:
        return None
    value = request.headers.get(header, "").strip()
    sent = request.headers.get(PROXY_SECRET_HEADER, "").encode()
    if not value or not hmac.compare_digest(sent, secret.get_secret_value().encode()):
        return None
    return value


@dataclass(frozen=True)
class SignInRecord:
    """A live `web_sign_in` row: who, how they signed in, and the approver groups their
    identity provider put them in (single sign-on with `group_map`)."""

    approver: str
    auth: AuthMethod
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class SignedIn:
    """The approver behind a console request, and how they were authenticated."""

    approver: ApproverSettings
    auth: AuthMethod
    groups: frozenset[str] = frozenset()


def signed_in(
    settings: Settings,
    request: Request,
    session: WebSession,
    approver_of: Callable[[str], SignInRecord | None],
) -> SignedIn | None:
    """The approver behind this request: the trusted proxy header, else the session's sign-in.

    `approver_of` looks the sign-in up in the database (None once signed out).
    """
    found = _signed_in(settings, request, session, approver_of)
    if found is not None:
        note_principal(found.approver.name)  # the access log's "by"
    return found


def _signed_in(
    settings: Settings,
    request: Request,
    session: WebSession,
    approver_of: Callable[[str], SignInRecord | None],
) -> SignedIn | None:
    value = proxy_user(settings, request)
    if value:
        approver = settings.approver(value) or settings.approver_by_email(value)
        return SignedIn(approver, PROXY) if approver else None
    if session.sign_in:
        record = approver_of(session.sign_in)
        approver = settings.approver(record.approver) if record is not None else None
        if record is not None and approver is not None:
            return SignedIn(approver, record.auth, record.groups)
    local = local_web_user(settings)
    return SignedIn(local, LOCAL) if local is not None else None
