"""Single sign-on test helpers: a gate whose `[oidc]` is the loopback fake provider, served on
the port its `public_url` names (the provider sends the browser back there), and the flow
walked step by step the way a browser walks it."""

from __future__ import annotations

import copy
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from gate.app import create_app
from gate.config.settings import Settings
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.fake_oidc import FakeOidc
from tests.support.servers import ThreadServer
from tests.web.conftest import _HASHES as PASSWORD_HASHES
from tests.web.conftest import WEB_RULES, browser

#: a rule whose approvals need a fresh single sign-on (five minutes)
STEP_UP_RULE: dict[str, Any] = {
    "name": "risky-transfers",
    "tools": ["transfer_*"],
    "approvers": ["group:finance"],
    "timeout": "10m",
    "step_up": {"max_age": "5m"},
}

SsoGateFactory = Callable[..., Gate]


def sso_data(database_url: str, idp: FakeOidc, port: int, **oidc: Any) -> dict[str, Any]:
    """The web tests' settings (passwords too) with `[oidc]` pointing at `idp`, the step-up
    rule, and mallory known to the provider by subject."""
    data = cfg.settings_data(database_url, public_url=f"http://127.0.0.1:{port}")
    data["rules"] = [copy.deepcopy(STEP_UP_RULE), *copy.deepcopy(WEB_RULES), *data["rules"]]
    for approver in data["approvers"]:
        approver["password_hash"] = PASSWORD_HASHES[approver["name"]]
        if approver["name"] == "mallory":
            approver["oidc"] = "sub-mallory-0004"
    data["oidc"] = idp.settings(**oidc)
    return data


def spare_port() -> int:
    """A loopback port free a moment ago, for a gate whose public_url must name its port
    before it starts (the provider redirects the browser there)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(settings: Settings, port: int) -> Iterator[Gate]:
    """Serve gate on `port` (the one its `public_url` names)."""
    server = ThreadServer(create_app(settings))
    server.server.config.port = port
    server.start()
    try:
        yield Gate(server, settings)
    finally:
        server.stop()


@dataclass
class Trip:
    """One sign-in walked step by step: where gate sent the browser, and the way back."""

    client: httpx.Client
    authorize: str
    callback: str
    #: the session cookie as it was before the callback took the sign-in's state out
    cookie_before: str

    def back(self, url: str | None = None) -> httpx.Response:
        """The browser arriving at gate's callback (`url`: another one, e.g. a wrong state)."""
        return self.client.get(url or self.callback)


def leave(client: httpx.Client, idp: FakeOidc, path: str = "/login/sso?next=/") -> Trip:
    """Start a sign-in and let the provider answer; stop before the browser returns."""
    out = client.get(path)
    assert out.status_code == 303, out.text
    authorize = out.headers["location"]
    assert authorize.startswith(idp.issuer + "/authorize?"), authorize
    answer = client.get(authorize)
    assert answer.status_code == 302, answer.text
    cookie = client.cookies.get("gate_session")
    assert cookie is not None
    return Trip(client, authorize, answer.headers["location"], cookie)


def query_of(url: str) -> dict[str, str]:
    """A URL's query, one value a name."""
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@contextmanager
def sso_signed_in(gate: Gate, idp: FakeOidc) -> Iterator[httpx.Client]:
    """A browser signed in through the provider."""
    with browser(gate) as client:
        trip = leave(client, idp)
        done = trip.back()
        assert done.status_code == 303, done.text
        yield client
