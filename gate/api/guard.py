"""Who may reach gate from a browser: loopback `Host` names in local mode, same-origin writes.

Two attacks come from a web page on another site, not from a client of gate:

* **DNS rebinding.** With no tokens (local mode) the API and console answer anyone who can
  reach the loopback port, and a page on `evil.example` whose name is re-pointed at
  127.0.0.1 can read and decide requests, since the browser thinks it is talking to
  `evil.example`. Its `Host` header still says `evil.example`: in local mode only loopback
  names (`localhost`, `127.0.0.1`, `[::1]`, on the bound port) are answered.
* **Cross-site writes.** A form, `<img>` or `fetch(..., {mode: "no-cors"})` on another site
  can POST to gate with the visitor's cookie, or to a token-less local API, without reading
  the answer. So every state-changing request must prove it comes from gate's own pages: a
  same-origin `Origin` (or `Sec-Fetch-Site: same-origin`), or `Content-Type:
  application/json`, which a page cannot send to another origin without a CORS preflight
  that gate never grants. A bearer token proves the same (a page cannot attach one), so
  agents, `gate hook` and the SDK pass; chat callbacks under `/channels/` are signed and
  verified by their channel instead.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from gate.api.middleware import send_error
from gate.config.settings import Settings
from gate.identity.auth import anonymous_allowed

#: methods that never change anything here (OPTIONS only ever gets 405: gate grants no CORS)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: chat platforms post here; each channel verifies its own signature on the raw bytes
SIGNED_PREFIX = "/channels/"
API_PREFIX = "/v1/"
_DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


class SameOriginGuard:
    """Refuse rebinding `Host` names in local mode and cross-site state-changing requests."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        #: token-less local mode: the API answers without credentials, so Host matters
        self.local = anonymous_allowed(settings)
        public = settings.server.public_url
        self.public_origin = parse_origin(public) if public else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is not None:
            await send_error(send, *refused)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """(status, code, message) when this HTTP request must be refused, else None."""
        headers = _headers(scope)
        host = headers.get("host", "")
        if self.local and not loopback_host(host, _bound_port(scope)):
            return (
                421,
                "host_not_allowed",
                f"gate runs in local mode (no tokens) and answers only loopback names "
                f"(localhost, 127.0.0.1, [::1]), not Host {host[:100]!r}; open it as "
                "http://127.0.0.1:<port>, or add [[tokens]] before exposing it",
            )
        if scope["method"] not in SAFE_METHODS and self._needs_proof(scope, headers):
            problem = self._cross_site(scope, headers)
            if problem:
                return 403, "cross_site_request", problem
        return None

    def _needs_proof(self, scope: Scope, headers: dict[str, str]) -> bool:
        path: str = scope["path"]
        # A page cannot attach a bearer token; Basic or Digest credentials a browser learnt
        # for this site (a proxy's login) it attaches to another site's form posts too.
        bearer = headers.get("authorization", "")[:7].lower() == "bearer "
        if path.startswith(SIGNED_PREFIX) or bearer:
            return False
        # Outside local mode the API answers only bearer tokens, which a page cannot attach.
        return self.local or not path.startswith(API_PREFIX)

    def _cross_site(self, scope: Scope, headers: dict[str, str]) -> str | None:
        """Why this state-changing request may come from another site, or None when it cannot."""
        origin = headers.get("origin")
        if origin is not None:
            own = request_origin(scope, headers.get("host", ""))
            theirs = parse_origin(origin)
            if theirs is not None and theirs in (own, self.public_origin):
                return None
            return (
                f"refused a request from another site (Origin {origin[:100]!r}): changes are "
                "accepted only from gate's own pages. Behind a proxy, set server.public_url "
                "to the address people open"
            )
        fetch_site = headers.get("sec-fetch-site")
        if fetch_site is not None:
            if fetch_site == "same-origin":
                return None
            return f"refused a request the browser marks as {fetch_site[:40]!r}, not same-origin"
        media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type == "application/json":
            return None
        return (
            "refused a state-changing request with no proof it comes from gate's own pages: "
            "send Content-Type: application/json (or a bearer token)"
        )


def parse_origin(value: str) -> Origin | None:
    """`scheme://host[:port]` as (scheme, host, port), with the scheme's default port."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def request_origin(scope: Scope, host: str) -> Origin | None:
    """The origin this request was sent to: its scheme (after trusted proxy headers) and Host."""
    scheme = str(scope.get("scheme", "http"))
    return parse_origin(f"{scheme}://{host}") if host else None


def loopback_host(host: str, bound_port: int | None) -> bool:
    """True for `localhost`, `127.x.y.z` or `[::1]`, without a port or on the bound one."""
    name, port = split_host(host)
    if name is None:
        return False
    if port is not None and bound_port is not None and port != bound_port:
        return False
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def split_host(host: str) -> tuple[str | None, int | None]:
    """A Host header as (name, port); (None, None) when it is not a valid one."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None, None
        name, rest = host[1:end], host[end + 1 :]
        if rest and not rest.startswith(":"):
            return None, None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text_or_empty = host.partition(":")
        port_text = port_text_or_empty if sep else None
    if not name:
        return None, None
    if port_text is None:
        return name, None
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        return None, None
    return name, int(port_text)


def _headers(scope: Scope) -> dict[str, str]:
    # The first of a repeated header wins; only a handful of single-valued ones are read.
    found: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        found.setdefault(raw_name.decode("latin-1").lower(), raw_value.decode("latin-1"))
    return found


def _bound_port(scope: Scope) -> int | None:
    server = scope.get("server")
    return int(server[1]) if server and server[1] is not None else None
