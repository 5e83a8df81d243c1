"""One browser context and page a worker lends to its browser tests, one test at a time.

A fresh context and page for a test cost Chromium some 0.6 s of CPU (the context, then a
renderer process for its page); going to a URL in a page already open, some 0.25 s. So the
first page of a test is this one, and between tests `give_back` takes from it everything a
test can leave behind:

* the document, with its event streams and timers: the page goes to about:blank;
* cookies, granted permissions, extra HTTP headers, routes;
* everything stored for each origin the page showed (local and session storage, IndexedDB,
  Cache Storage, service workers), the HTTP cache, `window.name` (it belongs to the tab, not
  the document), the history, the mouse's position;
* the listeners the test added to the page or its context;

and the next `borrow` sizes the viewport as asked. Anything else a test does to the page or its
context outlives a document and is not undone here (an init script, an exposed function, a
fake clock, a pressed key, offline mode, a page of its own in the context...): every public
method of Page and BrowserContext, and of the objects they hand out, is allowed only if listed
below as ending with the document or undone by `give_back`; calling any other *spends* the
tab, and the next test gets a new context and page. So does a reset that fails, and a page or
context the test closed. `page.requests()` lists the previous tests' requests too and nothing
clears it: on a borrowed page it raises (a test that needs it asks `open_page` for a fresh
page). tests/web/test_browser_tab.py checks all this against what a fresh context shows.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, CDPSession, Page

#: the viewport of a new context (the console's tests' laptop)
DEFAULT_VIEWPORT = (1280, 860)

#: Page methods whose effect ends with the document, that only read, or that `give_back` undoes
PAGE_ALLOWED = frozenset(
    {
        # the document and what is in it
        "add_script_tag", "add_style_tag", "aria_snapshot", "bring_to_front", "check",
        "click", "content", "dblclick", "dispatch_event", "drag_and_drop",
        "eval_on_selector", "eval_on_selector_all", "evaluate", "evaluate_handle", "fill",
        "focus", "frame", "frame_locator", "get_attribute", "get_by_alt_text", "get_by_label",
        "get_by_placeholder", "get_by_ref", "get_by_role", "get_by_test_id", "get_by_text",
        "get_by_title", "go_back", "go_forward", "goto", "hover", "inner_html", "inner_text",
        "input_value", "is_checked", "is_closed", "is_disabled", "is_editable", "is_enabled",
        "is_hidden", "is_visible", "locator", "opener", "pdf", "press", "query_selector",
        "query_selector_all", "reload", "remove_locator_handler", "request_gc", "screenshot",
        "select_option", "set_checked", "set_content", "set_input_files", "tap",
        "text_content", "title", "type", "uncheck", "close",
        # waiting: the waiter goes when the wait ends
        "expect_console_message", "expect_download", "expect_event", "expect_file_chooser",
        "expect_navigation", "expect_popup", "expect_request", "expect_request_finished",
        "expect_response", "expect_websocket", "expect_worker", "wait_for_event",
        "wait_for_function", "wait_for_load_state", "wait_for_selector", "wait_for_timeout",
        "wait_for_url",
        # undone by give_back (listeners: recorded as they are added, removed)
        "on", "once", "remove_listener", "route", "unroute", "unroute_all",
        "set_extra_http_headers", "set_viewport_size",
        # Playwright keeps these for the document shown (checked by tests/web/test_browser_tab.py)
        "console_messages", "page_errors", "clear_console_messages", "clear_page_errors",
    }
)  # fmt: skip
#: BrowserContext methods of the same kinds
CONTEXT_ALLOWED = frozenset(
    {
        "add_cookies", "clear_cookies", "clear_permissions", "close", "cookies",
        "expect_console_message", "expect_event", "expect_page", "grant_permissions",
        "is_closed", "on", "once", "remove_listener", "route", "set_extra_http_headers",
        "storage_state", "unroute", "unroute_all", "wait_for_event",
    }
)  # fmt: skip
#: the objects Page and BrowserContext hand out through a property, and their methods allowed
#: (any other spends the tab); None: not guarded, as it only reads or acts on the document
PAGE_PROPERTIES: dict[str, frozenset[str] | None] = {
    "context": None,  # the tab's context, guarded as such
    "frames": None,
    "main_frame": None,
    "url": None,
    "viewport_size": None,
    "video": None,
    "workers": None,
    "local_storage": None,  # the document's origin's storage: cleared
    "session_storage": None,
    # `down` without `up` leaves a key or button pressed
    "keyboard": frozenset({"press", "type", "insert_text", "up"}),
    "mouse": frozenset({"click", "dblclick", "move", "up", "wheel"}),
    "touchscreen": frozenset({"tap"}),
    "clock": frozenset(),
    "screencast": frozenset(),
    "webmcp": frozenset(),
    # the context's API client: its cookies are the context's (cleared); disposing it is not
    "request": frozenset(
        {"get", "post", "put", "patch", "delete", "head", "fetch", "cookies", "storage_state"}
    ),
}
CONTEXT_PROPERTIES: dict[str, frozenset[str] | None] = {
    "browser": None,  # shared by every test already, as the `chromium` fixture
    "pages": None,
    "background_pages": None,
    "service_workers": None,
    "clock": PAGE_PROPERTIES["clock"],
    "request": PAGE_PROPERTIES["request"],
    "tracing": frozenset(),
    "debugger": frozenset(),
    "credentials": frozenset(),
}


def _methods(obj: object) -> list[str]:
    """The public methods of `obj`'s class (not its properties)."""
    kind = type(obj)
    return [
        name
        for name in dir(kind)
        if not name.startswith("_")
        and not isinstance(inspect.getattr_static(kind, name), property)
        and callable(getattr(kind, name))
    ]


def _properties(kind: type) -> set[str]:
    """The public properties of `kind`."""
    return {
        name
        for name in dir(kind)
        if not name.startswith("_") and isinstance(inspect.getattr_static(kind, name), property)
    }


def _origin(url: str) -> str | None:
    """`scheme://host[:port]` of an http(s) URL; None for about:, data: and the like."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


class Tab:
    """The page lent to the first `open_page` of each test of a worker (see the module)."""

    def __init__(self, browser: Browser) -> None:
        from playwright.sync_api import BrowserContext, Page

        self._browser = browser
        self._page: Page | None = None
        self._context: BrowserContext | None = None
        self._cdp: CDPSession | None = None
        self._context_id = ""  # Chromium's id of the context, to count its pages
        self._lent = False
        #: a call `give_back` cannot undo was made: the next borrower gets a new page
        self.spent = False
        #: origins the page showed since it was lent (their storage is cleared)
        self._origins: set[str] = set()
        #: listeners the borrower added, as (emitter, event, listener)
        self._listeners: list[tuple[Any, str, Callable[..., Any]]] = []
        #: how many pages were replaced (spent, closed, or a reset that failed)
        self.replaced = 0
        self._guarded: set[int] = set()  # ids of the objects guarded (some are shared)
        unknown = (_properties(Page) - PAGE_PROPERTIES.keys()) | (
            _properties(BrowserContext) - CONTEXT_PROPERTIES.keys()
        )
        #: why pages are not lent (this Playwright has properties the list above misses)
        self.off = f"unclassified Playwright properties {sorted(unknown)}" if unknown else None

    def borrow(self, viewport: tuple[int, int] = DEFAULT_VIEWPORT) -> Page | None:
        """The page, on about:blank at `viewport`, with no cookies; None when the tab is lent
        out already or lending is off (the caller opens a context of its own)."""
        if self._lent or self.off:
            return None
        if self._page is None:
            self._open()
        assert self._page is not None
        self._page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
        self._lent = True
        return self._page

    def give_back(self) -> None:
        """Reset the page for the next borrower, or replace it when it was spent, closed, or
        the reset fails. Never raises: a test's failure must not fail the next one."""
        if not self._lent:
            return
        self._lent = False
        try:
            clean = not self.spent and self._reset()
        except Exception:  # any failure: the page is not known to be clean
            clean = False
        if not clean:
            self.replaced += 1
            self.close()

    def close(self) -> None:
        """Close the context (the next `borrow` opens a new one)."""
        context, self._context, self._page, self._cdp = self._context, None, None, None
        self._listeners.clear()
        self._origins.clear()
        self._guarded.clear()
        self.spent = False
        if context is not None:
            with contextlib.suppress(Exception):
                context.close()

    # -- inside ---------------------------------------------------------------------------

    def _open(self) -> None:
        width, height = DEFAULT_VIEWPORT
        context = self._browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        self._cdp = context.new_cdp_session(page)
        self._context_id = self._cdp.send("Target.getTargetInfo")["targetInfo"]["browserContextId"]
        page.on("framenavigated", lambda frame: self._saw(frame.url))
        self._guard_listeners(page)
        self._guard_listeners(context)
        self._guard(page, PAGE_ALLOWED)
        self._guard(context, CONTEXT_ALLOWED)
        for owner, properties in ((page, PAGE_PROPERTIES), (context, CONTEXT_PROPERTIES)):
            for name, allowed in properties.items():
                held = getattr(owner, name)
                if allowed is not None and held is not None:
                    self._guard(held, allowed)
        setattr(page, "requests", self._refuse_requests)  # noqa: B010 (shadows the method)
        self._context, self._page = context, page

    def _saw(self, url: str) -> None:
        origin = _origin(url)
        if origin:
            self._origins.add(origin)

    def _guard(self, obj: object, allowed: frozenset[str]) -> None:
        """Make each method of `obj` not in `allowed` spend the tab when called."""
        if id(obj) in self._guarded:  # the clock and the API client: page's and context's
            return
        self._guarded.add(id(obj))
        for name in _methods(obj):
            if name not in allowed:
                setattr(obj, name, self._spending(getattr(obj, name)))

    def _spending(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            self.spent = True
            return method(*args, **kwargs)

        return call

    def _guard_listeners(self, emitter: Any) -> None:
        """Record the listeners added to `emitter` from now on (`give_back` removes them)."""
        for name in ("on", "once"):
            add = getattr(emitter, name)

            def recording(event: str, f: Callable[..., Any], add: Callable[..., Any] = add) -> None:
                self._listeners.append((emitter, event, f))
                add(event, f)

            setattr(emitter, name, recording)

    def _refuse_requests(self) -> NoReturn:
        raise AssertionError(
            "page.requests() on a borrowed page lists earlier tests' requests too: "
            "open the page with open_page(..., fresh=True)"
        )

    def _reset(self) -> bool:
        """Take from the page and its context what the borrower left; False: not clean."""
        page, context, cdp = self._page, self._context, self._cdp
        assert page is not None and context is not None and cdp is not None
        if page.is_closed():
            return False
        for emitter, event, f in self._listeners:  # first: none of the test's code runs now
            emitter.remove_listener(event, f)
        self._listeners.clear()
        page.unroute_all(behavior="ignoreErrors")
        context.unroute_all(behavior="ignoreErrors")
        page.goto("about:blank", timeout=10_000)  # ends the document, its streams and timers
        page.evaluate("window.name = ''")  # the tab's, kept across documents
        page.mouse.move(0, 0)
        context.clear_cookies()
        context.clear_permissions()
        context.set_extra_http_headers({})
        page.set_extra_http_headers({})
        for origin in self._origins:
            cdp.send("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
        self._origins.clear()
        cdp.send("Network.clearBrowserCache")
        cdp.send("Page.resetNavigationHistory")  # about:blank only, as a new page starts
        # no other page in the context (a popup, new_page): asked of Chromium, which made a
        # popup before window.open returned, while Playwright may not have reported it yet
        targets = cdp.send("Target.getTargets")["targetInfos"]
        pages = [
            t for t in targets if t["type"] == "page" and t["browserContextId"] == self._context_id
        ]
        return len(pages) == 1
