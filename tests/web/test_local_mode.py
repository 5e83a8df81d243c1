"""With no configuration at all, the person at the machine can use the web console."""

from __future__ import annotations

import httpx

from gate.config.settings import Settings
from tests.conftest import GateFactory
from tests.support import config as cfg
from tests.support.http import TLS
from tests.web.conftest import browser


def _local_settings(sqlite_url: str, **server: object) -> Settings:
    data = cfg.settings_data(sqlite_url, **server)
    data["tokens"] = []
    return Settings(**data)


def test_local_mode_needs_no_sign_in_and_decides(make_gate: GateFactory, sqlite_url: str) -> None:
    gate = make_gate(settings=_local_settings(sqlite_url))
    with gate.client() as api:
        rid = api.post("/v1/gate", json={"tool_name": "ask_me", "tool_args": {}}).json()["request"][
            "id"
        ]
    with browser(gate) as web:
        page = web.get("/")
        assert page.status_code == 200
        assert "Local mode" in page.text
        detail = web.get(f"/requests/{rid}")
        assert 'action="/requests/' in detail.text
        csrf = detail.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        r = web.post(
            f"/requests/{rid}/decide",
            data={"verdict": "approve", "comment": "ok", "csrf_token": csrf},
        )
        assert r.status_code in (200, 303)
    with gate.client() as api:
        body = api.get(f"/v1/requests/{rid}").json()
    assert (body["status"], body["decided_by"], body["decided_via"]) == ("approved", "local", "web")


def test_no_local_mode_when_exposed_or_with_passwords(
    make_gate: GateFactory, sqlite_url: str
) -> None:
    exposed = make_gate(settings=_local_settings(sqlite_url, host="0.0.0.0"))
    with httpx.Client(base_url=exposed.url, follow_redirects=False, verify=TLS) as web:
        assert web.get("/").status_code in (302, 303)
    from argon2 import PasswordHasher

    data = cfg.settings_data(sqlite_url)
    data["tokens"] = []
    data["approvers"][0]["password_hash"] = PasswordHasher(time_cost=1, memory_cost=8192).hash("pw")
    with_passwords = make_gate(settings=Settings(**data))
    with httpx.Client(base_url=with_passwords.url, follow_redirects=False, verify=TLS) as web:
        assert web.get("/").status_code in (302, 303)
