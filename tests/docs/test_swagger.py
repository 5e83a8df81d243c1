"""`/docs` works offline: the page and everything it loads come from gate itself, under gate's
own security headers (no CDN, no inline script), and the vendored Swagger UI is the pinned one."""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path

from gate.api.docs import SWAGGER_UI_VERSION
from gate.api.headers import CSP
from tests.conftest import Gate

VENDORED = Path(__file__).resolve().parents[2] / "templates" / "static" / "swagger-ui"


class _Assets(HTMLParser):
    """Every address the page makes the browser load: script src, link href, img src."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.inline_scripts = 0
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "script":
            self._in_script = True
            if found.get("src"):
                self.urls.append(str(found["src"]))
        elif tag in ("link", "img") and (found.get("href") or found.get("src")):
            self.urls.append(str(found.get("href") or found.get("src")))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts += 1


def test_docs_page_loads_only_gates_own_files_under_its_headers(gate_sqlite: Gate) -> None:
    with gate_sqlite.client() as c:
        page = c.get("/docs")
        assets = _Assets()
        assets.feed(page.text)
        loaded = {url: c.get(url) for url in assets.urls}
        schema = c.get(re.search(r'data-openapi-url="([^"]+)"', page.text).group(1))  # type: ignore[union-attr]

    assert page.status_code == 200
    assert page.headers["content-security-policy"] == CSP
    assert page.headers["x-frame-options"] == "DENY"
    assert assets.inline_scripts == 0  # the CSP allows none
    assert sorted(assets.urls) == [
        "/static/favicon.svg",
        "/static/swagger-init.js",
        "/static/swagger-ui/swagger-ui-bundle.js",
        "/static/swagger-ui/swagger-ui.css",
    ]
    for url, answer in loaded.items():
        assert answer.status_code == 200, url
        assert answer.headers["content-security-policy"] == CSP, url
    assert (
        loaded["/static/swagger-ui/swagger-ui.css"].headers["content-type"].startswith("text/css")
    )
    assert schema.status_code == 200
    assert "/v1/gate" in schema.json()["paths"]


def test_there_is_no_cdn_page_left(gate_sqlite: Gate) -> None:
    with gate_sqlite.client() as c:
        redoc = c.get("/redoc")
        docs = c.get("/docs")
    assert redoc.status_code == 404  # FastAPI's ReDoc page loads from a CDN: turned off
    assert "//" not in docs.text  # no absolute or protocol-relative address at all


def test_the_vendored_swagger_ui_is_the_pinned_release() -> None:
    notes = (VENDORED / "VENDORED.md").read_text()
    assert f"`swagger-ui-dist` **{SWAGGER_UI_VERSION}**" in notes
    for name in ("swagger-ui-bundle.js", "swagger-ui.css"):
        digest = hashlib.sha256((VENDORED / name).read_bytes()).hexdigest()
        assert f"| `{name}` | `{digest}` |" in notes, name
    assert "Apache License" in (VENDORED / "LICENSE").read_text()
    assert (VENDORED / "NOTICE").read_text().startswith("swagger-ui")
