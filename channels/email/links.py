"""The links in an approval email: signed tokens that say who may act on which request.

A link token is `itsdangerous`' URL-safe serializer over `{"r": request id, "u": address,
"n": nonce}`, signed with HMAC-SHA256 under `[channels.email] link_secret` and stamped with
the time it was made. Nothing is stored: the token says which approver and which request
it was made for, and gate's decision pipeline says whether that approver may still act on
that request (pending, not past its deadline, not voted yet). So a link dies when its
request is decided or expires, a used link answers "you already approved" / "already
rejected by bob", and nothing gate keeps can be replayed into a decision (the database
holds no token, nor anything a token can be made from).

A token older than the server's `max_timeout` is refused outright: no request lives that
long, so such a link can only be a leftover or a forgery. Signatures are compared in
constant time by itsdangerous. Tokens are never logged (errors name no token).

The form on the confirm page carries a second token, `csrf`: the SHA-256 of the link token,
signed under another salt, valid for `FORM_MAX_AGE`. A decision needs both, sent together
in a POST: a GET (a mail scanner, a link preview) only ever shows the page.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadData, SignatureExpired, URLSafeTimedSerializer

LINK_SALT = "gate.channels.email.link"
CSRF_SALT = "gate.channels.email.csrf"
#: a confirm page must be submitted within an hour of being opened (then reopen the link)
FORM_MAX_AGE = 3600
#: a link token longer than this is not one of ours: refused before it is decoded
MAX_TOKEN_CHARS = 2048


@dataclass(frozen=True)
class Link:
    """Who a verified link token was made for."""

    request_id: str
    address: str


class BadLink(Exception):
    """A token that is not ours, was tampered with, or is too old. The message names no token."""


class Links:
    """Makes and checks link tokens and form tokens under one secret."""

    def __init__(self, secret: str, *, max_age: float) -> None:
        self._links = _serializer(secret, LINK_SALT)
        self._forms = _serializer(secret, CSRF_SALT)
        self._max_age = int(max_age)

    def make(self, request_id: str, address: str) -> str:
        """A new link token for `address` to act on `request_id`."""
        payload = {"r": request_id, "u": address, "n": secrets.token_urlsafe(9)}
        token: str = self._links.dumps(payload)
        return token

    def check(self, token: str | None) -> Link:
        """The approver and request a token was made for; BadLink when it is not valid."""
        if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
            raise BadLink("this link is not one gate sent (it is missing or cut)")
        try:
            payload: Any = self._links.loads(token, max_age=self._max_age)
        except BadData as exc:
            if isinstance(exc, SignatureExpired):
                raise BadLink("this link is too old: the request it was for has ended") from None
            raise BadLink("this link is not one gate sent (its signature does not match)") from None
        if not isinstance(payload, dict):
            raise BadLink("this link is not one gate sent")
        request_id, address = payload.get("r"), payload.get("u")
        if not isinstance(request_id, str) or not isinstance(address, str):
            raise BadLink("this link is not one gate sent")
        if not request_id or not address:
            raise BadLink("this link is not one gate sent")
        return Link(request_id, address)

    def form_token(self, link_token: str) -> str:
        """The CSRF token the confirm page's forms carry, tied to this link token."""
        token: str = self._forms.dumps(_digest(link_token))
        return token

    def form_ok(self, link_token: str, form_token: str | None) -> bool:
        """Whether `form_token` was made for this link token in the last hour."""
        if not form_token or len(form_token) > MAX_TOKEN_CHARS or not form_token.isascii():
            return False
        try:
            digest = self._forms.loads(form_token, max_age=FORM_MAX_AGE)
        except BadData:
            return False
        return isinstance(digest, str) and hmac.compare_digest(digest, _digest(link_token))


def _serializer(secret: str, salt: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(
        secret, salt=salt, signer_kwargs={"digest_method": hashlib.sha256}
    )


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("ascii", "replace")).hexdigest()
