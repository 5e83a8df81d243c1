"""The long-poll answered ahead of the middleware stack (`gate.api.lean`) answers as before.

A plain `GET /v1/requests/{id}/wait` is served by `LeanRoutes`; anything unusual (an exponent
in `timeout`, a body, a NUL, a refused Host) is handed to the FastAPI route behind the full
middleware stack. Each check here asks over real HTTP, and where both paths can answer, asks
both and compares status, bytes and headers, so the two cannot drift apart.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from gate.api.lean import GateAPI, LeanRoutes, plain_timeout
from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.http import TLS

SECURITY = ("content-security-policy", "x-frame-options", "x-content-type-options")
#: the same query as the plain `timeout=0`, in a form only the FastAPI route parses
HANDED_OVER = "0e0"


def long_poll(gate: Gate) -> LeanRoutes:
    app = gate.server.app
    assert isinstance(app, GateAPI) and app.lean_routes is not None
    return app.lean_routes


def ask(gate: Gate, token: str = cfg.AGENT) -> str:
    request_id: str = gate.submit(token, tool_name="ask_wait", tool_args={"n": 1})["request"]["id"]
    return request_id


def wait(
    gate: Gate, request_id: str, token: str | None, timeout: str = "0", **headers: str
) -> httpx.Response:
    sent = {"X-Request-ID": "wait-test-1", **headers}
    if token:
        sent.setdefault("Authorization", f"Bearer {token}")
    with httpx.Client(base_url=gate.url, headers=sent, timeout=30, verify=TLS) as c:
        return c.get(f"/v1/requests/{request_id}/wait", params={"timeout": timeout})


def both_paths(gate: Gate, request_id: str, token: str | None) -> tuple[httpx.Response, ...]:
    """The same long-poll answered by the lean path, then by the full stack."""
    lean = long_poll(gate)
    before = lean.answered["wait"]
    first = wait(gate, request_id, token)
    assert lean.answered["wait"] == before + 1, "the plain GET was not answered by the lean path"
    second = wait(gate, request_id, token, timeout=HANDED_OVER)
    assert lean.answered["wait"] == before + 1, "the unusual query was not handed to the stack"
    return first, second


def assert_same(lean: httpx.Response, full: httpx.Response) -> None:
    assert (lean.status_code, lean.content) == (full.status_code, full.content)
    for name in ("content-type", "content-length", "www-authenticate", "x-request-id", *SECURITY):
        assert lean.headers.get(name) == full.headers.get(name), name
    assert lean.headers["x-request-id"] == "wait-test-1"
    for name in SECURITY:
        assert name in lean.headers


@pytest.mark.parametrize(
    ("token", "status", "code"),
    [
        (None, 401, "missing_token"),
        ("not-a-token", 401, "invalid_token"),
        (cfg.OTHER_AGENT, 403, "not_your_request"),
        (cfg.AGENT, 200, None),
        (cfg.ALICE, 200, None),
    ],
)
def test_both_paths_answer_a_pending_request_alike(
    gate_sqlite: Gate, token: str | None, status: int, code: str | None
) -> None:
    request_id = ask(gate_sqlite)
    lean, full = both_paths(gate_sqlite, request_id, token)
    assert_same(lean, full)
    assert lean.status_code == status, lean.text
    if code is not None:
        assert lean.json()["error"]["code"] == code
    else:
        assert lean.json()["status"] == "pending"
    if status == 401:
        assert lean.headers["www-authenticate"] == "Bearer"


def test_a_bad_authorization_scheme_is_refused_alike(gate_sqlite: Gate) -> None:
    request_id = ask(gate_sqlite)
    lean, full = (
        wait(gate_sqlite, request_id, None, timeout=t, Authorization="Basic abc")
        for t in ("0", HANDED_OVER)
    )
    assert_same(lean, full)
    assert lean.json()["error"]["code"] == "bad_authorization_header"


def test_an_unknown_id_is_a_404_on_both_paths(gate: Gate) -> None:
    lean, full = both_paths(gate, "01NOPE", cfg.ADMIN)
    assert_same(lean, full)
    assert lean.status_code == 404
    assert lean.json()["error"]["code"] == "request_not_found"


def test_a_final_request_is_the_same_bytes_as_every_other_route_shows(gate: Gate) -> None:
    request_id = ask(gate)
    assert gate.decide(request_id, cfg.ALICE, comment="ok \u00e9\u2603").status_code == 200
    lean, full = both_paths(gate, request_id, cfg.AGENT)
    assert_same(lean, full)
    with gate.client(cfg.AGENT) as c:
        shown = c.get(f"/v1/requests/{request_id}")  # FastAPI's response_model encoding
    assert lean.content == shown.content
    assert lean.json()["status"] == "approved"
    assert lean.headers["content-type"] == shown.headers["content-type"] == "application/json"


def test_a_request_without_an_id_header_gets_a_new_one(gate_sqlite: Gate) -> None:
    request_id = ask(gate_sqlite)
    with gate_sqlite.client(cfg.AGENT) as c:
        first = c.get(f"/v1/requests/{request_id}/wait?timeout=0")
        second = c.get(f"/v1/requests/{request_id}/wait?timeout=0")
    ids = {first.headers["x-request-id"], second.headers["x-request-id"]}
    assert len(ids) == 2 and all(len(i) == 26 for i in ids)  # two fresh ULIDs


@pytest.mark.parametrize("timeout", ["-1", "3601", "abc", "", "1e9", "nan", "5&timeout=6"])
def test_a_bad_timeout_is_the_usual_422_or_the_stack_s_answer(
    gate_sqlite: Gate, timeout: str
) -> None:
    request_id = ask(gate_sqlite)
    lean = long_poll(gate_sqlite)
    before = lean.answered["wait"]
    with gate_sqlite.client(cfg.AGENT) as c:
        r = c.get(f"/v1/requests/{request_id}/wait?timeout={timeout}")
    assert lean.answered["wait"] == before  # handed over: FastAPI validates it as it always did
    if timeout == "5&timeout=6":
        assert r.status_code == 200  # a repeated query is FastAPI's to read, as before
        return
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_input"
    assert [p["field"] for p in error["problems"]] == ["timeout"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (b"", 25.0),
        (b"timeout=0", 0.0),
        (b"timeout=2.5", 2.5),
        (b"a=1&timeout=3600", 3600.0),
        (b"time%6Fut=7", 7.0),  # decoded the way Starlette decodes it
        (b"timeout=3600.5", None),
        (b"timeout=%2B5", None),  # "+5": signed
        (b"timeout=5.", None),
        (b"timeout=\xd9\xa5", None),  # an Arabic-Indic five: a digit, not an ASCII one
        (b"timeout=" + b"1" * 17, None),
    ],
)
def test_only_plain_timeouts_are_served_lean(text: bytes, seconds: float | None) -> None:
    assert plain_timeout(text) == seconds


def test_local_mode_refuses_a_rebound_host_on_the_long_poll(
    make_gate: GateFactory, sqlite_url: str
) -> None:
    data = cfg.settings_data(sqlite_url)
    data["tokens"] = []
    local = make_gate(settings=Settings(**data))
    request_id = ask(local, token="")
    lean = long_poll(local)
    before = lean.answered["wait"]
    refused = wait(local, request_id, None, Host="evil.example")
    assert refused.status_code == 421
    assert refused.json()["error"]["code"] == "host_not_allowed"
    # (the stack's ASGI-level refusals carry the id twice today, both the same)
    assert set(refused.headers.get_list("x-request-id")) == {"wait-test-1"}
    assert lean.answered["wait"] == before  # refused by the guard in the stack, not served lean
    served = wait(local, request_id, None)
    assert served.status_code == 200 and served.json()["status"] == "pending"
    assert lean.answered["wait"] == before + 1


def test_a_body_or_a_nul_meets_the_stack_s_limits(make_gate: GateFactory) -> None:
    gate = make_gate(max_body_bytes=1024)
    request_id = ask(gate)
    lean = long_poll(gate)
    before = lean.answered["wait"]
    with gate.client(cfg.AGENT) as c:
        big = c.request("GET", f"/v1/requests/{request_id}/wait?timeout=0", content=b"x" * 5000)
        nul = c.get(f"/v1/requests/{request_id}/wait?timeout=0&x=%00")
        small = c.request("GET", f"/v1/requests/{request_id}/wait?timeout=0", content=b"{}")
    assert big.status_code == 413 and big.json()["error"]["code"] == "payload_too_large"
    assert nul.status_code == 400 and nul.json()["error"]["code"] == "bad_request"
    assert small.status_code == 200  # a small body is still read past, as before
    assert lean.answered["wait"] == before


def test_a_final_request_is_answered_without_waiting(gate_sqlite: Gate) -> None:
    request_id = ask(gate_sqlite)
    with gate_sqlite.client(cfg.AGENT) as c:
        assert c.post(f"/v1/requests/{request_id}/cancel").status_code == 200
        # timeout=30 with a 5 s client timeout: only an immediate answer passes
        r = c.get(f"/v1/requests/{request_id}/wait?timeout=30", timeout=5)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"


async def test_waiters_of_one_request_are_woken_and_share_one_encoding(gate: Gate) -> None:
    request_id = ask(gate)
    notifier = gate.state.notifier
    n = 40
    headers = {"Authorization": f"Bearer {cfg.AGENT}"}
    limits = httpx.Limits(max_connections=n + 5)
    async with httpx.AsyncClient(
        base_url=gate.url, headers=headers, limits=limits, verify=TLS
    ) as client:
        waiters = [
            asyncio.create_task(
                client.get(f"/v1/requests/{request_id}/wait?timeout=30", timeout=60)
            )
            for _ in range(n)
        ]
        for _ in range(500):
            if notifier.waiting >= n:
                break
            await asyncio.sleep(0.02)
        assert notifier.waiting == n
        encodes = notifier.encodes
        r = await client.post(
            f"/v1/requests/{request_id}/decision",
            json={"verdict": "approve"},
            headers={"Authorization": f"Bearer {cfg.ALICE}"},
        )
        assert r.status_code == 200, r.text
        answers: list[Any] = await asyncio.gather(*waiters)
    assert {a.status_code for a in answers} == {200}
    assert len({a.content for a in answers}) == 1
    assert answers[0].json()["status"] == "approved"
    assert notifier.encodes == encodes + 1  # one encoding for all 40, whatever woke them
    assert notifier.waiting == 0


def test_openapi_still_documents_the_long_poll(gate_sqlite: Gate) -> None:
    with gate_sqlite.client() as c:
        spec = c.get("/openapi.json").json()
    op = spec["paths"]["/v1/requests/{request_id}/wait"]["get"]
    timeout = next(p for p in op["parameters"] if p["name"] == "timeout")
    assert timeout["schema"]["maximum"] == 3600 and timeout["schema"]["minimum"] == 0
    ok = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok["$ref"].endswith("/RequestPublic")
    assert {"401", "403", "404", "422"} <= set(op["responses"])
