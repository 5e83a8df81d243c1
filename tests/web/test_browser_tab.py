"""The page `open_page` lends from test to test (tests/support/tab.py) is as clean as a fresh
context for the next test: nothing one test leaves in it reaches the next, a test that does
something the reset cannot undo gets it replaced, and so does a reset that fails.

The site below stands in for a gate met again on a port the OS hands out once more: the next
test visits the same origin as the last one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tests.conftest import Gate
from tests.support.browser import BROWSER_TESTS, ENABLED
from tests.support.servers import ThreadServer
from tests.support.tab import Tab
from tests.web.conftest import OpenPage

pytestmark = BROWSER_TESTS

if TYPE_CHECKING or ENABLED:
    from playwright.sync_api import Browser, Page
    from playwright.sync_api import Error as PlaywrightError

PAGE = "<!doctype html><title>site</title><p>site</p><script src='/static.js'></script>"
#: what a page shows of the state a test could leave: a fresh context's page shows the same
PROBE = """async () => ({
  cookie: document.cookie,
  local: localStorage.length,
  session: sessionStorage.length,
  name: window.name,
  history: history.length,
  notifications: Notification.permission,
  databases: (await indexedDB.databases()).length,
  caches: (await caches.keys()).length,
  workers: (await navigator.serviceWorker.getRegistrations()).length,
  routed: window.__routed === true,
  static: window.__static,
  size: [innerWidth, innerHeight],
})"""


class Site:
    """A page and a script cacheable by heuristics (Last-Modified, no Cache-Control), as
    gate's /static files are; each request's path and headers are recorded."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.app = Starlette(routes=[Route("/", self._page), Route("/static.js", self._script)])
        self.server = ThreadServer(self.app)

    @property
    def url(self) -> str:
        return self.server.url

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    async def _page(self, request: Request) -> Response:
        self.requests.append((request.url.path, dict(request.headers)))
        return HTMLResponse(PAGE)

    async def _script(self, request: Request) -> Response:
        self.requests.append((request.url.path, dict(request.headers)))
        return Response(
            "window.__static = (window.__static || 0) + 1;",
            media_type="text/javascript",
            headers={"Last-Modified": "Mon, 01 Jan 2024 00:00:00 GMT"},
        )


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    s = Site()
    with s.server:
        yield s


@pytest.fixture(scope="module")
def module_tab(chromium: Browser) -> Iterator[Tab]:
    """A tab of this module's own (not the worker's, which other tests borrow)."""
    t = Tab(chromium)
    yield t
    t.close()


@pytest.fixture
def lender(module_tab: Tab) -> Iterator[Tab]:
    """The module's tab, given back after each test (one that failed may still hold it)."""
    yield module_tab
    module_tab.give_back()


def _visit(tab: Tab, site: Site, viewport: tuple[int, int] = (1280, 860)) -> Page:
    """Borrow the page and open the site, as `open_page` does."""
    page = tab.borrow(viewport)
    assert page is not None, tab.off
    page.goto(site.url + "/")
    return page


def _fresh_probe(chromium: Browser, site: Site) -> dict[str, Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 860})
    try:
        page = context.new_page()
        page.goto(site.url + "/")
        probe: dict[str, Any] = page.evaluate(PROBE)
        return probe
    finally:
        context.close()


def test_nothing_one_test_leaves_in_the_page_reaches_the_next(
    chromium: Browser, lender: Tab, site: Site
) -> None:
    replaced = lender.replaced
    page = _visit(lender, site, viewport=(390, 844))
    context = page.context
    heard: list[str] = []
    page.on("console", lambda m: heard.append(m.text))
    page.on("dialog", lambda d: (heard.append(d.message), d.accept()))
    context.on("request", lambda r: heard.append(r.url))
    page.route("**/static.js", lambda route: route.fulfill(body="window.__routed = true"))
    context.grant_permissions(["notifications"], origin=site.url)
    context.set_extra_http_headers({"X-Left": "by the context"})
    page.set_extra_http_headers({"X-Left-Page": "by the page"})
    context.add_cookies(
        [
            {"name": "left", "value": "1", "url": site.url},
            {"name": "elsewhere", "value": "1", "url": "http://127.0.0.2:1"},  # never shown
        ]
    )
    page.reload()  # with the route, the headers and the cookie
    page.evaluate(
        """async () => {
          localStorage.setItem('left', '1');
          sessionStorage.setItem('left', '1');
          document.cookie = 'doc=1';
          window.name = 'left';
          history.pushState({}, '', '/pushed');
          await new Promise(done => { indexedDB.open('left').onsuccess = done; });
          await (await caches.open('left')).put('/x', new Response('x'));
          console.log('said in the first test');
          setTimeout(() => { throw new Error('thrown in the first test'); });
        }"""
    )
    page.mouse.click(300, 200)
    probe = page.evaluate(PROBE)
    assert probe["routed"] and probe["local"] == 1 and probe["notifications"] == "granted"
    assert probe["size"] == [390, 844]
    assert heard  # the listeners heard the first test
    assert page.page_errors()
    lender.give_back()

    site.requests.clear()
    heard.clear()
    again = _visit(lender, site)
    assert again is page  # the same page, reset: not a new context
    assert lender.replaced == replaced
    assert again.evaluate(PROBE) == _fresh_probe(chromium, site)
    assert again.context.cookies() == []
    # the script came from the site again (not the HTTP cache, not the route), with none of
    # the first test's headers or cookies
    assert site.paths() == ["/", "/static.js", "/", "/static.js"]  # this page, then the fresh one
    for _, headers in site.requests:
        assert "x-left" not in headers and "x-left-page" not in headers
        assert "cookie" not in headers
    again.evaluate("console.log('said in the second test'); alert('a dialog nobody handles')")
    assert heard == []  # the first test's listeners are gone
    assert [m.text for m in again.console_messages()] == ["said in the second test"]
    assert again.page_errors() == []
    # the mouse is where a new page's is (a press without a move lands there)
    again.evaluate("window.__at = []; addEventListener('mousedown', e => __at.push([e.x, e.y]))")
    again.mouse.down()
    again.mouse.up()
    assert again.evaluate("window.__at") == [[0, 0]]


def _crash(page: Page) -> None:
    """Crash the page's renderer: the reset's first navigation then fails."""
    with contextlib.suppress(PlaywrightError):  # the navigation to it fails with it
        page.goto("chrome://crash")


@pytest.mark.parametrize(
    "leave",
    [
        # a call on the page, on its context, on an object the page hands out
        pytest.param(lambda p: p.add_init_script("window.__init = 1"), id="init script"),
        pytest.param(lambda p: p.context.expose_function("left", lambda: 1), id="exposed"),
        pytest.param(lambda p: p.keyboard.down("Shift"), id="pressed key"),
        pytest.param(lambda p: p.context.new_page(), id="a page of its own"),
        pytest.param(lambda p: p.evaluate("window.open('/')"), id="a popup"),
        pytest.param(lambda p: p.context.close(), id="closed"),
        pytest.param(_crash, id="a reset that fails"),
    ],
)
def test_a_page_the_reset_cannot_clean_is_replaced(lender: Tab, site: Site, leave: Any) -> None:
    replaced = lender.replaced
    page = _visit(lender, site)
    leave(page)
    lender.give_back()

    again = _visit(lender, site)
    assert again is not page
    assert lender.replaced == replaced + 1
    assert len(again.context.pages) == 1
    assert again.evaluate("[window.__init, typeof window.left, window.__static]") == [
        None,
        "undefined",
        1,
    ]


def test_a_borrowed_page_will_not_list_earlier_tests_requests(lender: Tab, site: Site) -> None:
    page = _visit(lender, site)
    with pytest.raises(AssertionError, match="earlier tests' requests"):
        page.requests()


def test_the_first_page_of_a_test_is_lent_and_a_second_is_a_context_of_its_own(
    web_gate: Gate, open_page: OpenPage, tab: Tab
) -> None:
    alice = open_page(web_gate, "alice").page
    bob = open_page(web_gate, "bob").page
    assert tab.borrow() is None  # lent to this test: alice's page
    assert alice.context is not bob.context
    (alices,) = alice.context.cookies()
    (bobs,) = bob.context.cookies()
    assert alices["value"] != bobs["value"]
    assert alice.evaluate("history.length") == bob.evaluate("history.length")
