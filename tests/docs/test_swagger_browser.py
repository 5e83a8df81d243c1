"""`/docs` in a real browser (Debian's Chromium): Swagger UI renders gate's API, every request
the page makes goes to gate itself, and gate's CSP blocks nothing the page needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.conftest import Gate
from tests.support.browser import (
    BROWSER_TESTS,
    chromium,  # noqa: F401 (the module-scoped browser fixture)
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Request

pytestmark = BROWSER_TESTS


def test_swagger_ui_renders_offline_from_gate_alone(chromium: Browser, gate_sqlite: Gate) -> None:  # noqa: F811
    from playwright.sync_api import expect

    context = chromium.new_context()
    page = context.new_page()
    requested: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requested.append(r.url))

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":  # a CSP violation is reported here
            problems.append(message.text)

    def failed(request: Request) -> None:
        problems.append(f"{request.url}: {request.failure}")

    page.on("console", console)
    page.on("requestfailed", failed)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    try:
        page.goto(f"{gate_sqlite.url}/docs")
        expect(page.locator(".swagger-ui .info .title")).to_contain_text("gate", timeout=20_000)
        expect(page.locator(".opblock-summary-path", has_text="/v1/gate").first).to_be_visible()
    finally:
        context.close()

    assert problems == []
    assert requested and all(url.startswith(f"{gate_sqlite.url}/") for url in requested), requested
    assert f"{gate_sqlite.url}/openapi.json" in requested
