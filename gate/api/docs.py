"""`/docs`: the API explorer (Swagger UI), served by gate itself.

FastAPI's own page loads Swagger UI from a CDN with an inline script; gate's security headers
(`gate.web.session.CSP`: scripts and styles from gate's own origin only) block both, and a
server on a closed network has no CDN. So the page here names only gate's own files: the
Swagger UI distribution vendored under `templates/static/swagger-ui/` (see its VENDORED.md)
and a start-up script of gate's own, all under `/static`, with gate's usual headers.
"""

from __future__ import annotations

from html import escape

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

#: the vendored `swagger-ui-dist` (templates/static/swagger-ui/VENDORED.md)
SWAGGER_UI_VERSION = "5.35.0"

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} API</title>
<link rel="icon" href="{root}/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="{root}/static/swagger-ui/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi-url="{openapi}"></div>
<script src="{root}/static/swagger-ui/swagger-ui-bundle.js"></script>
<script src="{root}/static/swagger-init.js"></script>
</body>
</html>
"""


def install(app: FastAPI, path: str = "/docs") -> None:
    """Serve the API explorer at `path` (the app must be built with `docs_url=None`)."""

    @app.get(path, include_in_schema=False)
    async def api_explorer(request: Request) -> HTMLResponse:
        root = escape(str(request.scope.get("root_path", "")).rstrip("/"))
        page = PAGE.format(
            title=escape(app.title),
            root=root,
            openapi=f"{root}{escape(app.openapi_url or '/openapi.json')}",
        )
        return HTMLResponse(page, headers={"cache-control": "no-cache"})
