"""gate's app serves its routers' routes as they were built (`GateAPI.include_router`):
FastAPI's wrapper would analyse every route again on an app's first requests."""

from __future__ import annotations

import httpx
from fastapi import APIRouter
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import Mount, Route

from gate.api.lean import GateAPI
from gate.app import create_app
from tests.conftest import GateFactory
from tests.support import config as cfg
from tests.support.http import TLS


def test_every_route_is_served_as_built(sqlite_url: str) -> None:
    """No wrapper of an included router is left in the app: each entry is a route itself."""
    app = create_app(cfg.make_settings(sqlite_url))
    kinds = {type(route) for route in app.routes}
    assert kinds <= {APIRoute, Route, Mount}, kinds
    paths = {route.path for route in app.routes if isinstance(route, APIRoute)}
    # the API's, the console's and the metrics' routes, each from its own router
    assert {"/v1/gate", "/v1/requests/{request_id}/decision", "/healthz", "/login"} <= paths


def test_an_include_with_options_keeps_fastapis_meaning() -> None:
    router = APIRouter()
    router.add_api_route("/ping", lambda: {"ok": True}, methods=["GET"])
    app = GateAPI()
    app.include_router(router, prefix="/under")
    with TestClient(app) as client:
        assert client.get("/under/ping").json() == {"ok": True}
        assert client.get("/ping").status_code == 404


def test_the_first_requests_of_a_new_app_answer(make_gate: GateFactory) -> None:
    """Every kind of route answers on an app's first request (API, console, health, docs)."""
    gate = make_gate()
    with httpx.Client(base_url=gate.url, verify=TLS) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/login").status_code == 200
        assert client.get("/openapi.json").json()["paths"]["/v1/gate"]
        asked = client.post(
            "/v1/gate",
            json={"tool_name": "read_file", "tool_args": {"path": "/a"}},
            headers={"Authorization": f"Bearer {cfg.AGENT}"},
        )
        assert asked.status_code == 200 and asked.json()["decision"] == "allow"
