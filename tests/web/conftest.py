"""Web console fixtures: a gate whose approvers have passwords, and signed-in clients."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from argon2 import PasswordHasher

from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.browser import launched
from tests.support.tab import Tab

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

PASSWORDS = {name: f"pw-{name}-correct horse" for name in ("alice", "bob", "carol", "mallory")}
#: cheap argon2 parameters: the tests check the scheme, not its cost
_HASHER = PasswordHasher(time_cost=1, memory_cost=8 * 1024, parallelism=1)
_HASHES = {name: _HASHER.hash(pw) for name, pw in PASSWORDS.items()}
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')
#: rules for the beyond-yes/no pages, ahead of the standard ones (tools no other test uses)
WEB_RULES: list[dict[str, Any]] = [
    {
        "name": "refunds",
        "tools": ["refund_*"],
        "approvers": ["group:finance"],
        "timeout": "10m",
        "reject_reasons": ["wrong customer", "too expensive"],
        "grant_scopes": ["call", "session", "agent"],
        "max_grant": "1h",
    },
    {"name": "no-edits", "tools": ["strict_*"], "allow_edits": False, "timeout": "10m"},
    {
        # the agent tools whose calls the console renders tool by tool (issue 28)
        "name": "agent-tools",
        "tools": ["Bash", "Edit", "MultiEdit", "Write", "apply_patch", "WebFetch", "mcp__*"],
        "timeout": "10m",
        "reason": "Agent tools need a human",
    },
    {
        # a chain (issue 32): carol leads, then finance approves with a word of why; a
        # request without the agent's justification cannot be approved
        "name": "chained",
        "tools": ["chain_*"],
        "timeout": "10m",
        "justification": "to_review",
        "stages": [
            {"name": "lead", "approvers": ["carol"]},
            {"name": "finance", "approvers": ["group:finance"], "justify": True},
        ],
    },
    {
        # pattern and counted grants (issue 32): the repo is always pinned, at most 3 uses
        "name": "releases",
        "tools": ["release_*"],
        "timeout": "10m",
        "grant_scopes": ["call", "pattern"],
        "grant_pin": ["repo"],
        "max_grant_uses": 3,
    },
    {
        "name": "grantable",
        "tools": ["shell_*"],
        "timeout": "10m",
        "grant_scopes": ["session", "agent"],
        "max_grant": "45m",
    },
]


def web_settings(
    database_url: str, *, without_password: tuple[str, ...] = (), **server: Any
) -> Settings:
    """The standard settings, with password hashes for the approvers."""
    data = cfg.settings_data(database_url, **server)
    data["rules"] = copy.deepcopy(WEB_RULES) + data["rules"]
    for approver in data["approvers"]:
        if approver["name"] not in without_password:
            approver["password_hash"] = _HASHES[approver["name"]]
    return Settings(**data)


WebGateFactory = Callable[..., Gate]


@pytest.fixture
def make_web_gate(make_gate: GateFactory, sqlite_url: str) -> WebGateFactory:
    """Start a gate whose approvers can sign in to the web console."""

    def factory(database_url: str | None = None, **server: Any) -> Gate:
        without = server.pop("without_password", ())
        url = database_url or sqlite_url
        return make_gate(settings=web_settings(url, without_password=without, **server))

    return factory


@pytest.fixture
def web_gate_db(make_web_gate: WebGateFactory, db_url: str) -> Gate:
    """The same, on each database (SQLite, and PostgreSQL when configured)."""
    return make_web_gate(database_url=db_url)


@pytest.fixture
def web_gate(make_web_gate: WebGateFactory) -> Gate:
    """A gate with signed-in-able approvers on SQLite."""
    return make_web_gate()


def csrf_of(html: str) -> str:
    """The CSRF token in a rendered form."""
    match = CSRF_RE.search(html)
    assert match, "no CSRF field in the page"
    return match.group(1)


def browser(gate: Gate, **kwargs: Any) -> httpx.Client:
    """An httpx client posting forms the way a browser does on gate's own pages.

    Browsers send `Origin` on every POST; gate refuses a form post without a same-origin one.
    """
    client = gate.client(follow_redirects=False, **kwargs)
    client.headers["Origin"] = gate.url
    return client


@contextmanager
def sign_in(gate: Gate, name: str, password: str | None = None) -> Iterator[httpx.Client]:
    """An httpx client with a signed-in web session."""
    with browser(gate) as client:
        page = client.get("/login")
        assert page.status_code == 200, page.text
        r = client.post(
            "/login",
            data={
                "username": name,
                "password": password or PASSWORDS[name],
                "csrf_token": csrf_of(page.text),
                "next": "/",
            },
        )
        assert r.status_code == 303, r.text
        yield client


def landed(client: httpx.Client, response: httpx.Response, path: str) -> httpx.Response:
    """The page a form redirected to (POST/redirect/GET), after checking it went to `path`."""
    assert response.status_code == 303, response.text
    assert response.headers["location"] == path
    page = client.get(path)
    assert page.status_code == 200, page.text
    return page


def submit_refund(gate: Gate, **extra: Any) -> str:
    """Submit a refund the rule asks about; returns the request id."""
    body: dict[str, Any] = {
        "tool_name": "refund_customer",
        "tool_args": {"customer": "c1", "amount": 900, "note": "<b>late</b>"},
        "user_id": "dave",
        "agent_id": "billing-bot",
        "session_id": "sess-1",
    }
    body.update(extra)
    answer = gate.submit(**body)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def api_view(gate: Gate, request_id: str) -> dict[str, Any]:
    """The request as the API shows it to an admin."""
    with gate.client(cfg.ADMIN) as c:
        data: dict[str, Any] = c.get(f"/v1/requests/{request_id}").json()
    return data


def post_decide(c: httpx.Client, request_id: str, **data: Any) -> httpx.Response:
    """Post the request page's decide form with its CSRF token and `data`."""
    token = csrf_of(c.get(f"/requests/{request_id}").text)
    return c.post(f"/requests/{request_id}/decide", data={"csrf_token": token, **data})


def flash_error(html: str) -> str:
    """The error a page shows beside its form, unescaped."""
    match = re.search(r'<p class="flash error" role="alert">([^<]*)</p>', html)
    assert match, "no error on the page"
    return match.group(1).replace("&#34;", '"').replace("&#39;", "'")


def set_offers(gate: Gate, request_id: str, **offers: Any) -> None:
    """Freeze `offers` (`watched_args`, `condition_error`) onto a stored request's options, as
    the policy does when a rule's condition reads arguments or fails at ask time."""
    import sqlalchemy as sa
    from sqlmodel import col

    from gate.store.tables import ConfirmationRequest

    db = gate.state.db
    with db.read() as session:
        row = session.get(ConfirmationRequest, request_id)
        assert row is not None
        options = {**(row.options or {}), **offers}
    with db.write_conn() as conn:
        conn.execute(
            sa.update(ConfirmationRequest)
            .where(col(ConfirmationRequest.id) == request_id)
            .values(options=options)
        )


# -- the browser (Playwright), for test_browser*.py ------------------------------------------


@pytest.fixture(scope="package")
def chromium() -> Iterator[Browser]:
    """One headless Chromium for the run of tests/web tests in this process, not one per
    module: a launch costs most of a second of CPU and some fifteen modules here use it.
    Tests do not share state through it: the first page of each is the `tab`, reset between
    tests, and any other is a fresh context closed afterwards. Nothing in tests/web runs an
    event loop in the test thread (see `launched`); a test that must, runs it in a thread of
    its own."""
    yield from launched()


@pytest.fixture(scope="package")
def tab(chromium: Browser) -> Iterator[Tab]:
    """The page lent to the first `open_page` of each test, reset in between
    (tests/support/tab.py): a new context and page for every test cost Chromium more than
    twice the CPU."""
    reused = Tab(chromium)
    yield reused
    reused.close()


ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
#: copies of the screenshots the docs show (docs/development.md)
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "images" / "screenshots"


class Watched:
    """A page plus everything it said: dialogs, console errors, uncaught exceptions."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()


OpenPage = Callable[..., Watched]


@pytest.fixture
def open_page(request: pytest.FixtureRequest) -> Iterator[OpenPage]:
    """`open_page(gate, "alice")`: a browser page of its own, signed in, on the queue page
    (`form=True`: signed in through the sign-in form).

    The first in a test is the worker's `tab`, reset since the last test used it; the others
    (a second person in the same test), and any with `fresh=True`, are fresh contexts."""
    from playwright.sync_api import expect

    chrome: Browser = request.getfixturevalue("chromium")  # one browser for tests/web
    reused: Tab = request.getfixturevalue("tab")

    contexts: list[Any] = []
    borrowed = False

    def factory(
        gate: Gate,
        name: str,
        *,
        viewport: tuple[int, int] = (1280, 860),
        form: bool = False,
        fresh: bool = False,
    ) -> Watched:
        nonlocal borrowed
        page = None if borrowed or fresh else reused.borrow(viewport)
        borrowed = borrowed or page is not None
        if page is None:
            context = chrome.new_context(viewport={"width": viewport[0], "height": viewport[1]})
            contexts.append(context)
            page = context.new_page()
        watched = Watched(page)
        if form:  # through the sign-in form, as a person does
            page.goto(gate.url + "/")
            expect(page).to_have_url(re.compile(r"/login\?next=/$"))
            page.fill("#username", name)
            page.fill("#password", PASSWORDS[name])
            page.get_by_role("button", name="Sign in").click()
        else:
            # Signed in over HTTP, the session cookie handed to the browser: drawing the
            # sign-in page in Chromium costs half a second of CPU, and most tests are about
            # the pages behind it (test_browser.py signs in through the form).
            with sign_in(gate, name) as client:
                cookie = client.cookies["gate_session"]
            page.context.add_cookies(
                [
                    {
                        "name": "gate_session",
                        "value": cookie,
                        "url": gate.url,
                        "httpOnly": True,
                        "sameSite": "Lax",
                    }
                ]
            )
            page.goto(gate.url + "/")
        expect(page).to_have_url(gate.url + "/")
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        # going live refreshes the rows (catching up on what changed since the page was
        # served): measuring before it lands would measure rows about to be replaced
        expect(page.locator("#queue[data-refreshed]")).to_have_count(1)
        return watched

    yield factory
    if borrowed:
        reused.give_back()
    for context in contexts:
        context.close()


def artifact(name: str) -> Path:
    """Where a test's screenshot `name` goes (test-artifacts/, made if missing)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / name


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    """A screenshot of `page` into test-artifacts/`name`, when the docs show it (a copy is in
    docs/images/screenshots/) or GATE_TEST_SCREENSHOTS=all: the others are for a person
    looking over a change of the pages, and each costs Chromium a fifth of a second of CPU or
    more (a whole page's, more)."""
    if (DOCS_SCREENSHOTS / name).exists() or os.environ.get("GATE_TEST_SCREENSHOTS") == "all":
        page.screenshot(path=str(artifact(name)), full_page=full_page)
