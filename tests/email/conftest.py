"""Fixtures for the email channel: a real SMTP server on loopback, a gate wired to it, and the
links in the mail it received, followed over HTTP."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from gate.config.settings import Settings
from tests.channels.drivers.email import Page
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.browser import chromium  # noqa: F401 (the module-scoped browser fixture)
from tests.support.chat_rules import CHAT_RULES
from tests.support.fake_smtp import FakeSMTP, Received
from tests.support.http import TLS
from tests.support.servers import wait_until

LINK_SECRET = "email-tests-link-secret-0123456789abcdef"
CREDENTIALS = ("gate@example.com", "smtp-password-for-tests")
ADDRESSES = {
    "alice": "alice@example.com",
    "bob": "bob@example.com",
    "carol": "carol@example.com",
    "mallory": "mallory@example.com",
}


@pytest.fixture
def smtp() -> Iterator[FakeSMTP]:
    """A real SMTP server (aiosmtpd) with STARTTLS and AUTH, on a free loopback port."""
    fake = FakeSMTP(credentials=CREDENTIALS, tls=True).start()
    yield fake
    fake.stop()


def email_table(fake: FakeSMTP, **email: Any) -> dict[str, Any]:
    """`[channels.email]` pointed at the fake."""
    return {
        "host": "127.0.0.1",
        "port": fake.port,
        "security": "starttls",
        "validate_certs": False,  # the fake's certificate is self-signed
        "username": CREDENTIALS[0],
        "password": CREDENTIALS[1],
        "sender": "gate <gate@example.com>",
        "link_secret": LINK_SECRET,
        "default_target": "approvers",
        "timeout": 5,
        **email,
    }


def email_settings(
    database_url: str,
    fake: FakeSMTP,
    *,
    extra_rules: Sequence[dict[str, Any]] = (),
    server: dict[str, Any] | None = None,
    **email: Any,
) -> Settings:
    """The standard test settings and the chat rules, an email address per approver and only
    the email channel; `extra_rules` are matched before the others."""
    data = cfg.settings_data(database_url, **(server or {}))
    data["rules"] = [*extra_rules, *CHAT_RULES, *data["rules"]]
    for approver in data["approvers"]:
        approver["email"] = ADDRESSES[approver["name"]]
    data["channels"] = {"email": email_table(fake, **email)}
    return Settings(**data)


@pytest.fixture
def email_gate(smtp: FakeSMTP, make_gate: GateFactory, sqlite_url: str) -> Gate:
    """A gate on SQLite whose only channel is email, sending to the fake (which is set up
    first, so it stops last: the gate never sends to a server already gone)."""
    return make_gate(settings=email_settings(sqlite_url, smtp))


# -- reading the mail ---------------------------------------------------------------------


def mails(fake: FakeSMTP, request_id: str, to: str | None = None) -> list[Received]:
    """The mails about a request (to one address), oldest first."""
    return fake.about(request_id, to)


def wait_mail(fake: FakeSMTP, request_id: str, to: str, count: int = 1) -> Received:
    """The `count`-th mail about a request to `to` (waits for the outbox to send it)."""
    found: list[Received] = wait_until(lambda: (m := mails(fake, request_id, to)) and (
        m if len(m) >= count else None
    ))  # fmt: skip
    return found[count - 1]


def links(mail: Received) -> dict[str, str]:
    """The decision links in a mail's HTML, by action (`do`)."""
    found = {}
    for url in Page(mail.part("html")).links:
        do = parse_qs(urlsplit(url).query).get("do")
        if do:
            found[do[0]] = url
    return found


def token(mail: Received) -> str:
    """The link token in a mail."""
    url = next(iter(links(mail).values()))
    return parse_qs(urlsplit(url).query)["t"][0]


def local(url: str, gate: Gate) -> str:
    """A link from a mail, pointed at the test's gate (its public URL is the default one)."""
    parts = urlsplit(url)
    return f"{gate.url}{parts.path}?{parts.query}"


def open_link(gate: Gate, url: str, **headers: str) -> tuple[httpx.Response, Page]:
    """GET a link as a browser would."""
    r = httpx.get(
        local(url, gate), headers={"Accept": "text/html", **headers}, timeout=10, verify=TLS
    )
    return r, Page(r.text)


def submit(
    gate: Gate, url: str, page: Page, fields: dict[str, Any] | None = None, **headers: str
) -> tuple[httpx.Response, Page]:
    """POST the page's form (its hidden fields plus `fields`) to the link's address."""
    data = {**page.hidden, **(fields or {})}
    r = httpx.post(local(url, gate), data=data, headers={"Accept": "text/html", **headers},
                   timeout=10, verify=TLS)  # fmt: skip
    return r, Page(r.text)


def state(gate: Gate, request_id: str) -> dict[str, Any]:
    """The request as the API shows it."""
    with gate.client(cfg.ADMIN) as c:
        r = c.get(f"/v1/requests/{request_id}")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def ask(gate: Gate, tool: str = "pay_vendor", args: Any = None, **extra: Any) -> str:
    """Submit a call that needs a human; the request's id."""
    extra.setdefault("user_id", "dave")
    answer = gate.submit(tool_name=tool, tool_args=args or {"amount": 60000}, **extra)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id
