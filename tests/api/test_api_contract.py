"""The v1 API's contract: policy answers, auth matrix, every error path in the one error shape."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from tests.conftest import Gate, GateFactory
from tests.support import config as cfg

PAY = {"tool_name": "pay_vendor", "tool_args": {"amount": 60000}}


def _error(r: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return dict(body["error"])


def _rows(gate: Gate) -> int:
    with gate.state.db.read() as s:
        return int(s.execute(sa.text("SELECT count(*) FROM confirmation_request")).scalar_one())


# -- policy answers -------------------------------------------------------------------------


def test_no_rule_matched_is_allow_with_null_rule_and_no_write(gate_sqlite: Gate) -> None:
    answer = gate_sqlite.submit(tool_name="pay_vendor", tool_args={"amount": 10})
    assert answer == {
        "decision": "allow",
        "rule": None,
        "reason": "No rule matched",
        "request": None,
    }
    assert _rows(gate_sqlite) == 0


def test_allow_and_deny_rules(gate_sqlite: Gate) -> None:
    allow = gate_sqlite.submit(tool_name="read_file", tool_args={"path": "/etc"})
    assert (allow["decision"], allow["rule"]) == ("allow", "reads")
    deny = gate_sqlite.submit(tool_name="db_write", tool_args={"env": "prod"})
    assert deny == {
        "decision": "deny",
        "rule": "deny-prod-writes",
        "reason": "No writes to prod from agents",
        "request": None,
    }
    assert _rows(gate_sqlite) == 0


def test_requires_confirmation_forces_ask(gate_sqlite: Gate) -> None:
    answer = gate_sqlite.submit(tool_name="anything", metadata={"requires_confirmation": True})
    assert answer["decision"] == "ask"
    assert answer["rule"] == "requires_confirmation"
    assert answer["request"]["status"] == "pending"


def test_when_that_cannot_evaluate_fails_closed(gate_sqlite: Gate) -> None:
    # `args.amount > 50000` on a call without `amount`: an ask rule matches rather than allow.
    answer = gate_sqlite.submit(tool_name="pay_vendor", tool_args={"note": "no amount"})
    assert answer["decision"] == "ask" and answer["rule"] == "big-payments"


def test_list_pages_with_cursor(gate_sqlite: Gate) -> None:
    ids = [gate_sqlite.submit(**PAY)["request"]["id"] for _ in range(5)]
    with gate_sqlite.client(cfg.ADMIN) as c:
        first = c.get("/v1/requests", params={"status": "pending", "limit": 2}).json()
        second = c.get(
            "/v1/requests", params={"status": "pending", "limit": 2, "cursor": first["next_cursor"]}
        ).json()
        third = c.get("/v1/requests", params={"limit": 2, "cursor": second["next_cursor"]}).json()
    got = [r["id"] for page in (first, second, third) for r in page["items"]]
    assert got == list(reversed(ids))
    assert third["next_cursor"] is None


# -- auth matrix ----------------------------------------------------------------------------

ROLES = {
    "none": None,
    "bad": "not-a-token",
    "agent": cfg.AGENT,
    "other-agent": cfg.OTHER_AGENT,
    "approver": cfg.ALICE,
    "admin": cfg.ADMIN,
}

# endpoint -> expected status per role, for a request submitted by billing-agent
MATRIX = {
    "submit": {
        "none": 401,
        "bad": 401,
        "agent": 200,
        "other-agent": 200,
        "approver": 403,
        "admin": 200,
    },
    "get": {
        "none": 401,
        "bad": 401,
        "agent": 200,
        "other-agent": 403,
        "approver": 200,
        "admin": 200,
    },
    "list": {
        "none": 401,
        "bad": 401,
        "agent": 200,
        "other-agent": 200,
        "approver": 200,
        "admin": 200,
    },
    "wait": {
        "none": 401,
        "bad": 401,
        "agent": 200,
        "other-agent": 403,
        "approver": 200,
        "admin": 200,
    },
    "decide": {
        "none": 401,
        "bad": 401,
        "agent": 403,
        "other-agent": 403,
        "approver": 200,
        "admin": 200,
    },
    "cancel": {
        "none": 401,
        "bad": 401,
        "agent": 200,
        "other-agent": 403,
        "approver": 403,
        "admin": 200,
    },
}


@pytest.mark.parametrize("endpoint", list(MATRIX))
@pytest.mark.parametrize("role", list(ROLES))
def test_auth_matrix(gate_sqlite: Gate, endpoint: str, role: str) -> None:
    rid = gate_sqlite.submit(**PAY)["request"]["id"]
    calls = {
        "submit": ("POST", "/v1/gate", PAY),
        "get": ("GET", f"/v1/requests/{rid}", None),
        "list": ("GET", "/v1/requests", None),
        "wait": ("GET", f"/v1/requests/{rid}/wait?timeout=0", None),
        "decide": ("POST", f"/v1/requests/{rid}/decision", {"verdict": "approve"}),
        "cancel": ("POST", f"/v1/requests/{rid}/cancel", None),
    }
    method, path, body = calls[endpoint]
    with gate_sqlite.client(ROLES[role]) as c:
        r = c.request(method, path, json=body)
    expected = MATRIX[endpoint][role]
    assert r.status_code == expected, r.text
    if expected == 401:
        assert r.json()["error"]["code"] in ("missing_token", "invalid_token")
        assert r.headers["www-authenticate"] == "Bearer"
    if expected == 403:
        assert r.json()["error"]["code"] in ("wrong_role", "not_your_request")


def test_agents_list_only_their_own(gate_sqlite: Gate) -> None:
    gate_sqlite.submit(**PAY)
    gate_sqlite.submit(token=cfg.OTHER_AGENT, **PAY)
    with gate_sqlite.client(cfg.OTHER_AGENT) as c:
        items = c.get("/v1/requests").json()["items"]
    assert len(items) == 1


def test_malformed_authorization_header(gate_sqlite: Gate) -> None:
    with gate_sqlite.client() as c:
        r = c.get("/v1/requests", headers={"Authorization": "Basic abc"})
    _error(r, 401, "bad_authorization_header")


def test_anonymous_mode_only_without_tokens_on_loopback(
    make_gate: GateFactory, sqlite_url: str
) -> None:
    data = cfg.settings_data(sqlite_url)
    data["tokens"] = []
    from gate.config.settings import Settings

    gate = make_gate(settings=Settings(**data))
    with gate.client() as c:
        assert c.post("/v1/gate", json=PAY).json()["decision"] == "ask"
    data["server"]["host"] = "0.0.0.0"
    exposed = make_gate(settings=Settings(**data))
    with exposed.client() as c:
        _error(c.post("/v1/gate", json=PAY), 401, "missing_token")


# -- bad input ------------------------------------------------------------------------------


def test_malformed_json(gate_sqlite: Gate) -> None:
    with gate_sqlite.client(cfg.AGENT) as c:
        r = c.post(
            "/v1/gate", content=b'{"tool_name": ', headers={"content-type": "application/json"}
        )
    err = _error(r, 400, "malformed_json")
    assert "not valid JSON" in str(err["message"])


@pytest.mark.parametrize(
    "body, field",
    [
        ({"tool_args": {}}, "tool_name"),
        ({"tool_name": 5}, "tool_name"),
        ({"tool_name": "x", "tool_args": [1, 2]}, "tool_args"),
        ({"tool_name": ""}, "tool_name"),
        ({"tool_name": "x", "surprise": 1}, "surprise"),
    ],
)
def test_wrong_types_are_422_naming_the_field(
    gate_sqlite: Gate, body: dict[str, object], field: str
) -> None:
    with gate_sqlite.client(cfg.AGENT) as c:
        err = _error(c.post("/v1/gate", json=body), 422, "invalid_input")
    assert field in str(err["message"])


def test_bad_decision_body(gate_sqlite: Gate) -> None:
    rid = gate_sqlite.submit(**PAY)["request"]["id"]
    with gate_sqlite.client(cfg.ALICE) as c:
        err = _error(
            c.post(f"/v1/requests/{rid}/decision", json={"verdict": "maybe"}), 422, "invalid_input"
        )
    assert "verdict" in str(err["message"])


def test_unknown_ids_and_routes(gate_sqlite: Gate) -> None:
    with gate_sqlite.client(cfg.ADMIN) as c:
        _error(c.get("/v1/requests/01NOPE"), 404, "request_not_found")
        _error(c.get("/v1/requests/01NOPE/wait?timeout=0"), 404, "request_not_found")
        _error(
            c.post("/v1/requests/01NOPE/decision", json={"verdict": "approve"}),
            404,
            "request_not_found",
        )
        _error(c.post("/v1/requests/01NOPE/cancel"), 404, "request_not_found")
        _error(c.get("/v1/nothing-here"), 404, "not_found")
        _error(c.delete("/v1/gate"), 405, "method_not_allowed")
        _error(c.get("/v1/requests", params={"status": "maybe"}), 422, "invalid_input")


def test_oversized_body_by_content_length(make_gate: GateFactory) -> None:
    gate = make_gate(max_body_bytes=1024)
    with gate.client(cfg.AGENT) as c:
        r = c.post("/v1/gate", json={"tool_name": "pay_x", "tool_args": {"blob": "x" * 5000}})
    err = _error(r, 413, "payload_too_large")
    assert "1024" in str(err["message"])
    assert _rows(gate) == 0


def test_oversized_chunked_body(make_gate: GateFactory) -> None:
    gate = make_gate(max_body_bytes=1024)

    def chunks() -> Iterator[bytes]:
        yield b'{"tool_name": "pay_x", "tool_args": {"blob": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}}'

    with gate.client(cfg.AGENT) as c:
        r = c.post("/v1/gate", content=chunks(), headers={"content-type": "application/json"})
    _error(r, 413, "payload_too_large")


def test_garbage_on_the_socket_is_not_a_500(gate_sqlite: Gate) -> None:
    host, port = "127.0.0.1", int(gate_sqlite.url.rsplit(":", 1)[1])
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"POST /v1/gate HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
        reply = s.recv(4096)
    assert not reply.startswith(b"HTTP/1.1 500")


def test_request_ids_are_echoed(gate_sqlite: Gate) -> None:
    with gate_sqlite.client() as c:
        r = c.get("/healthz", headers={"X-Request-ID": "trace-123"})
    assert r.headers["x-request-id"] == "trace-123"


def test_health_and_readiness(gate_sqlite: Gate) -> None:
    with gate_sqlite.client() as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "scheduler": "ok"}
