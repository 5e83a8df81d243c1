"""The security headers every response carries, web pages and API answers alike."""

from __future__ import annotations

#: no inline script or style anywhere, nothing from another origin, never framed
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


#: on every response gate sends (`gate.api.middleware.RequestEnvelope` adds them)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


def with_security_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` with each of `SECURITY_HEADERS` the response did not set itself appended
    (what `RequestEnvelope` adds to every response, for a path that answers ahead of it)."""
    present = {name.lower() for name, _ in headers}
    headers.extend(h for h in SECURITY_HEADERS if h[0] not in present)
    return headers
