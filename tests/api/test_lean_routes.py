"""`POST /v1/gate` and `POST .../decision` answered ahead of the middleware (`gate.api.lean`).

Each check sends the same request twice over real HTTP (raw `http.client`, so chunks,
`Transfer-Encoding` and `Expect` are the client's to choose): once to the app as it runs,
once with its lean routes detached so FastAPI's full stack answers. Status, body bytes and
the headers the stack sets must be the same. The `LeanRoutes` counters say which path
answered: served lean, read lean and handed to the stack (anything not plainly valid), or
left to the stack before reading (a guard refusal, a limit, another content type).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from gate.api.headers import SECURITY_HEADERS
from gate.api.lean import GateAPI, LeanRoutes
from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg

LIMIT = 2048
COMPARED = ("content-type", "content-length", "www-authenticate", "retry-after", "x-request-id")
SECURITY = [name.decode() for name, _ in SECURITY_HEADERS]
DECIDE = "/v1/requests/{}/decision"

#: which path answered: served lean, read lean then handed over, or the stack's alone
SERVED, HANDED_OVER, STACK = "served", "handed over", "stack"


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

    def json(self) -> Any:
        return json.loads(self.body)


def send(
    gate: Gate,
    path: str,
    parts: list[bytes],
    token: str | None = None,
    *,
    chunked: bool = False,
    content_type: str | None = "application/json",
    **headers: str,
) -> Reply:
    """POST `parts` (each sent on its own, a pause between) on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", gate.server.port, timeout=30)
    try:
        sent = {"X-Request-ID": "lean-test-1"}
        sent.update({name.replace("_", "-"): value for name, value in headers.items()})
        conn.putrequest("POST", path, skip_host="Host" in sent, skip_accept_encoding=True)
        if token:
            sent["Authorization"] = f"Bearer {token}"
        if content_type is not None:
            sent["Content-Type"] = content_type
        if chunked:
            sent["Transfer-Encoding"] = "chunked"
        elif "Content-Length" not in sent:
            sent["Content-Length"] = str(sum(len(p) for p in parts))
        for name, value in sent.items():
            conn.putheader(name, value)
        conn.endheaders()
        for part in parts:
            conn.send(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            if len(parts) > 1:
                time.sleep(0.03)  # each its own read on the server: its own ASGI message
        if chunked:
            conn.send(b"0\r\n\r\n")
        response = conn.getresponse()  # skips a "100 Continue"
        body = response.read()
        return Reply(response.status, [(k.lower(), v) for k, v in response.getheaders()], body)
    finally:
        conn.close()


def lean_routes(gate: Gate) -> LeanRoutes:
    app = gate.server.app
    assert isinstance(app, GateAPI) and app.lean_routes is not None
    return app.lean_routes


@contextmanager
def full_stack(gate: Gate) -> Iterator[None]:
    """The lean routes detached: every request goes through FastAPI and its middleware."""
    app = gate.server.app
    assert isinstance(app, GateAPI)
    lean, app.lean_routes = app.lean_routes, None
    try:
        yield
    finally:
        app.lean_routes = lean


def path_taken(lean: LeanRoutes, route: str, request: Callable[[], Reply]) -> tuple[str, Reply]:
    """Which path answered `request()` (the counters of `lean`, attached or not), and how."""
    before = lean.answered[route], lean.handed_over[route]
    reply = request()
    after = lean.answered[route], lean.handed_over[route]
    if after == (before[0] + 1, before[1]):
        return SERVED, reply
    if after == (before[0], before[1] + 1):
        return HANDED_OVER, reply
    assert after == before
    return STACK, reply


def both_paths(gate: Gate, route: str, request: Callable[[], Reply]) -> tuple[str, Reply, Reply]:
    """The same request as the app answers it, then as the full stack alone answers it."""
    lean = lean_routes(gate)
    taken, first = path_taken(lean, route, request)
    with full_stack(gate):
        taken_without, second = path_taken(lean, route, request)
    assert taken_without == STACK
    return taken, first, second


def assert_same(first: Reply, second: Reply) -> None:
    assert (first.status, first.body) == (second.status, second.body)
    for name in (*COMPARED, *SECURITY):
        assert first.header(name) == second.header(name), name


def ask(gate: Gate, tool_name: str = "ask_lean") -> str:
    request_id: str = gate.submit(cfg.AGENT, tool_name=tool_name, tool_args={"n": 1})["request"][
        "id"
    ]
    return request_id


def body(value: Any) -> list[bytes]:
    return [json.dumps(value).encode()]


@pytest.fixture
def small(make_gate: GateFactory) -> Gate:
    """A gate on SQLite with a small body limit and a shallow JSON depth limit."""
    return make_gate(max_body_bytes=LIMIT, json_max_depth=4)


# -- POST /v1/gate ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "status", "code"),
    [
        (cfg.AGENT, 200, None),
        (cfg.ADMIN, 200, None),
        (None, 401, "missing_token"),
        ("not-a-token", 401, "invalid_token"),
        (cfg.ALICE, 403, None),
    ],
)
def test_a_call_is_answered_alike_on_both_paths(
    small: Gate, token: str | None, status: int, code: str | None
) -> None:
    call = body({"tool_name": "read_file", "tool_args": {"path": "/etc/motd"}})
    taken, lean, full = both_paths(small, "gate", lambda: send(small, "/v1/gate", call, token))
    assert taken == SERVED
    assert_same(lean, full)
    assert lean.status == status, lean.body
    if status == 200:
        assert (lean.json()["decision"], lean.json()["rule"]) == ("allow", "reads")
    elif code is not None:
        assert lean.json()["error"]["code"] == code
    if status == 401:
        assert lean.header("www-authenticate") == "Bearer"


def test_a_denied_call_is_the_same_bytes(small: Gate) -> None:
    call = body({"tool_name": "db_write", "tool_args": {"env": "prod"}})
    taken, lean, full = both_paths(small, "gate", lambda: send(small, "/v1/gate", call, cfg.AGENT))
    assert taken == SERVED
    assert_same(lean, full)
    assert lean.json()["decision"] == "deny"


def test_an_ask_is_the_same_bytes_created_lean_and_replayed_by_the_stack(gate: Gate) -> None:
    call = body({"tool_name": "ask_lean", "tool_args": {"n": 1}, "idempotency_key": "k-1"})
    taken, created, replayed = both_paths(
        gate, "gate", lambda: send(gate, "/v1/gate", call, cfg.AGENT)
    )
    assert taken == SERVED
    assert_same(created, replayed)
    answer = created.json()
    assert answer["decision"] == "ask" and answer["request"]["status"] == "pending"
    with gate.client(cfg.AGENT) as c:
        shown = c.get(f"/v1/requests/{answer['request']['id']}")
    assert json.dumps(answer["request"], separators=(",", ":")).encode() == shown.content


@pytest.mark.parametrize(
    ("sent", "status", "code"),
    [
        (b'{"tool_name": "read_file",', 400, "malformed_json"),
        (b'{"tool_name": "read_file"} trailing', 400, "malformed_json"),
        (b"\xef\xbb\xbf" + b'{"tool_name": "read_file"}', 200, None),  # json.loads reads a BOM
        (b'{"tool_args": {}}', 422, "invalid_input"),
        (b'{"tool_name": "read_file", "surprise": 1}', 422, "invalid_input"),
        (b'{"tool_name": "read_file", "tool_args": {"s": "\\u0000"}}', 422, "invalid_input"),
        (b'{"tool_name": "read_file", "tool_args": {"s": "\\ud800"}}', 422, "invalid_input"),
        (b'{"tool_name": "read_file", "tool_args": {"a": {"b": {"c": {"d": {}}}}}}', 422, None),
        (b"", 422, "invalid_input"),
        (b"[]", 422, "invalid_input"),
    ],
)
def test_a_body_that_is_not_plainly_valid_is_the_stack_s_to_answer(
    small: Gate, sent: bytes, status: int, code: str | None
) -> None:
    taken, lean, full = both_paths(
        small, "gate", lambda: send(small, "/v1/gate", [sent], cfg.AGENT)
    )
    assert taken == HANDED_OVER
    assert_same(lean, full)
    assert lean.status == status, lean.body
    if code is not None:
        assert lean.json()["error"]["code"] == code


def test_the_configured_json_limits_hold_on_the_lean_path(small: Gate) -> None:
    shallow = body({"tool_name": "read_file", "tool_args": {"a": {"b": 1}}})
    deep = body({"tool_name": "read_file", "tool_args": {"a": {"b": {"c": {"d": {}}}}}})
    taken, lean, full = both_paths(
        small, "gate", lambda: send(small, "/v1/gate", shallow, cfg.AGENT)
    )
    assert (taken, lean.status) == (SERVED, 200)
    taken, lean, full = both_paths(small, "gate", lambda: send(small, "/v1/gate", deep, cfg.AGENT))
    assert (taken, lean.status) == (HANDED_OVER, 422)
    assert_same(lean, full)
    assert "json_max_depth" in lean.json()["error"]["message"]


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("text/plain", 422),  # FastAPI does not parse it: "a valid dictionary" expected
        ("application/vnd.gate+json", 200),  # FastAPI parses +json too
        (None, 422),
        ("application/json; charset=utf-8", 200),  # the same media type: served lean
    ],
)
def test_another_content_type_is_answered_as_before(
    small: Gate, content_type: str | None, status: int
) -> None:
    call = body({"tool_name": "read_file"})
    taken, lean, full = both_paths(
        small, "gate", lambda: send(small, "/v1/gate", call, cfg.AGENT, content_type=content_type)
    )
    assert taken == (SERVED if content_type and "charset" in content_type else STACK)
    assert_same(lean, full)
    assert lean.status == status, lean.body


# -- limits, transfer and the guard (both routes) -----------------------------------------------


@pytest.fixture(params=["gate", "decision"])
def route(request: pytest.FixtureRequest, small: Gate) -> tuple[str, str, str, list[bytes]]:
    """(route, path, token, a valid body) for each lean POST, on `small`."""
    if request.param == "gate":
        return "gate", "/v1/gate", cfg.AGENT, body({"tool_name": "read_file", "tool_args": {}})
    return (
        "decision",
        DECIDE.format(ask(small)),
        cfg.ALICE,
        body({"verdict": "reject", "comment": "no"}),
    )


def test_a_body_over_the_limit_by_its_length_is_refused_by_the_stack(
    small: Gate, route: tuple[str, str, str, list[bytes]]
) -> None:
    name, path, token, _ = route
    big = [b'{"tool_name": "' + b"x" * LIMIT + b'"}']
    taken, lean, full = both_paths(small, name, lambda: send(small, path, big, token))
    assert taken == STACK
    assert_same(lean, full)
    assert lean.status == 413 and lean.json()["error"]["code"] == "payload_too_large"


def test_a_streamed_body_over_the_limit_is_read_then_refused_by_the_stack(
    small: Gate, route: tuple[str, str, str, list[bytes]]
) -> None:
    name, path, token, _ = route
    parts = [b'{"tool_name": "', *[b"x" * 900] * 3, b'"}']
    taken, lean, full = both_paths(
        small, name, lambda: send(small, path, parts, token, chunked=True)
    )
    assert taken == HANDED_OVER
    assert_same(lean, full)
    assert lean.status == 413 and lean.json()["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("transfer", ["several chunks", "chunked", "expect"])
def test_a_valid_body_however_it_arrives_is_served_lean(
    small: Gate, route: tuple[str, str, str, list[bytes]], transfer: str
) -> None:
    name, path, token, (whole,) = route
    parts = [whole[:5], whole[5:9], whole[9:]]
    extra = {"Expect": "100-continue"} if transfer == "expect" else {}
    lean_reply = send(small, path, parts, token, chunked=transfer == "chunked", **extra)
    assert lean_reply.status == 200, lean_reply.body
    if name == "decision":  # decided now: the stack's answer to the same body is the 409
        with full_stack(small):
            again = send(small, path, parts, token, chunked=transfer == "chunked", **extra)
        assert again.status == 409
        assert lean_reply.json()["status"] == "rejected"
        return
    with full_stack(small):
        full = send(small, path, parts, token, chunked=transfer == "chunked", **extra)
    assert_same(lean_reply, full)


def test_a_refused_body_in_several_chunks_reaches_the_stack_whole(
    small: Gate, route: tuple[str, str, str, list[bytes]]
) -> None:
    name, path, token, (whole,) = route
    refused = whole[:-1] + b', "surprise": 1}'  # what is wrong is in the last chunk
    parts = [refused[:5], refused[5:-8], refused[-8:]]
    taken, lean, full = both_paths(small, name, lambda: send(small, path, parts, token))
    assert taken == HANDED_OVER
    assert_same(lean, full)
    assert lean.status == 422, lean.body
    assert [p["field"] for p in lean.json()["error"]["problems"]] == ["surprise"]


@pytest.mark.parametrize("where", ["path", "query"])
def test_a_nul_in_the_url_is_the_stack_s_400(
    small: Gate, route: tuple[str, str, str, list[bytes]], where: str
) -> None:
    name, path, token, sent = route
    if where == "query":
        path += "?x=%00"
    elif name == "gate":
        path = "/v1/gate%00"  # not the route any more: handed over untouched
    else:
        path = path.replace("/decision", "%00/decision")
    taken, lean, full = both_paths(small, name, lambda: send(small, path, sent, token))
    assert taken == STACK
    assert_same(lean, full)
    assert lean.status == 400 and lean.json()["error"]["code"] == "bad_request"


def test_local_mode_refuses_a_rebound_host_on_both_routes(
    make_gate: GateFactory, sqlite_url: str
) -> None:
    data = cfg.settings_data(sqlite_url)
    data["tokens"] = []
    local = make_gate(settings=Settings(**data))
    request_id = local.submit("", tool_name="ask_lean", tool_args={})["request"]["id"]
    for name, path, sent in [
        ("gate", "/v1/gate", body({"tool_name": "read_file"})),
        ("decision", DECIDE.format(request_id), body({"verdict": "approve"})),
    ]:
        taken, lean, full = both_paths(
            local,
            name,
            lambda: send(local, path, sent, Host="evil.example"),  # noqa: B023
        )
        assert taken == STACK
        assert (lean.status, lean.body) == (full.status, full.body)
        assert lean.status == 421 and lean.json()["error"]["code"] == "host_not_allowed"
        # a page on another site cannot post either: no token, no JSON content type
        taken, lean, full = both_paths(
            local,
            name,
            lambda: send(local, path, sent, content_type="text/plain"),  # noqa: B023
        )
        assert taken == STACK and lean.status == full.status == 403
        assert lean.body == full.body
    served = send(local, DECIDE.format(request_id), body({"verdict": "approve"}))
    assert served.status == 200 and served.json()["decided_by"] == "local"


# -- POST /v1/requests/{id}/decision ------------------------------------------------------------


def test_a_decision_is_answered_as_every_other_route_shows_the_request(gate: Gate) -> None:
    verdict = body({"verdict": "approve", "comment": "ok \u00e9\u2603"})
    lean_path = lean_routes(gate)

    def decide_and_show(request_id: str) -> tuple[str, Reply]:
        taken, reply = path_taken(
            lean_path, "decision", lambda: send(gate, DECIDE.format(request_id), verdict, cfg.ALICE)
        )
        assert reply.status == 200, reply.body
        with gate.client(cfg.ALICE) as c:
            shown = c.get(f"/v1/requests/{request_id}")
        assert reply.body == shown.content  # FastAPI's response_model encoding, byte for byte
        return taken, reply

    taken, lean = decide_and_show(ask(gate))
    assert taken == SERVED
    with full_stack(gate):
        taken, full = decide_and_show(ask(gate))
    assert taken == STACK
    varying = {"date", "content-length"}
    assert [h for h in lean.headers if h[0] not in varying] == [
        h for h in full.headers if h[0] not in varying
    ]
    same = {"status", "decided_by", "decided_via", "approvers", "tool_name", "tool_args"}
    assert {k: lean.json()[k] for k in same} == {k: full.json()[k] for k in same}
    assert lean.json()["votes"][0]["comment"] == "ok \u00e9\u2603"


def test_a_second_decision_is_the_same_409_on_both_paths(gate: Gate) -> None:
    request_id = ask(gate)
    assert gate.decide(request_id, cfg.ALICE).status_code == 200
    verdict = body({"verdict": "reject", "comment": "no"})
    taken, lean, full = both_paths(
        gate, "decision", lambda: send(gate, DECIDE.format(request_id), verdict, cfg.BOB)
    )
    assert taken == SERVED
    assert_same(lean, full)
    assert lean.status == 409, lean.body


@pytest.mark.parametrize(
    ("token", "tool_name", "status", "code"),
    [
        (None, "ask_lean", 401, "missing_token"),
        ("not-a-token", "ask_lean", 401, "invalid_token"),
        (cfg.AGENT, "ask_lean", 403, None),  # an agent token may not decide
        (cfg.ALICE, "deploy_app", 403, None),  # not an approver of the ops-only rule
    ],
)
def test_a_refused_decision_is_the_same_on_both_paths(
    small: Gate, token: str | None, tool_name: str, status: int, code: str | None
) -> None:
    request_id = ask(small, tool_name)
    verdict = body({"verdict": "approve"})
    taken, lean, full = both_paths(
        small, "decision", lambda: send(small, DECIDE.format(request_id), verdict, token)
    )
    assert taken == SERVED
    assert_same(lean, full)
    assert lean.status == status, lean.body
    if code is not None:
        assert lean.json()["error"]["code"] == code
    with small.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["status"] == "pending"


def test_an_unknown_id_is_the_same_404(gate: Gate) -> None:
    verdict = body({"verdict": "approve"})
    taken, lean, full = both_paths(
        gate, "decision", lambda: send(gate, DECIDE.format("01NOPE"), verdict, cfg.ALICE)
    )
    assert taken == SERVED
    assert_same(lean, full)
    assert lean.status == 404 and lean.json()["error"]["code"] == "request_not_found"


@pytest.mark.parametrize(
    ("sent", "status"),
    [
        (b'{"verdict": "approve"', 400),
        (b'{"verdict": "maybe"}', 422),
        (b'{"verdict": "approve", "comment": "' + b"c" * 4001 + b'"}', 413),
        (b'{"verdict": "approve", "grant": {"scope": "forever", "duration": "1h"}}', 422),
        (b'{"verdict": "approve", "reasons": "not a list"}', 422),
    ],
)
def test_a_decision_body_that_is_not_plainly_valid_is_the_stack_s(
    small: Gate, sent: bytes, status: int
) -> None:
    request_id = ask(small)
    taken, lean, full = both_paths(
        small, "decision", lambda: send(small, DECIDE.format(request_id), [sent], cfg.ALICE)
    )
    assert taken == (STACK if status == 413 else HANDED_OVER)
    assert_same(lean, full)
    assert lean.status == status, lean.body
    with small.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{request_id}").json()["status"] == "pending"


# -- what every lean answer carries -------------------------------------------------------------


def test_lean_answers_carry_the_request_id_and_the_security_headers(small: Gate) -> None:
    request_id = ask(small)
    lean = lean_routes(small)
    before = +lean.answered
    replies = {
        "gate ok": send(small, "/v1/gate", body({"tool_name": "read_file"}), cfg.AGENT),
        "gate 403": send(small, "/v1/gate", body({"tool_name": "read_file"}), cfg.ALICE),
        "decision 404": send(
            small, DECIDE.format("01NOPE"), body({"verdict": "approve"}), cfg.ALICE
        ),
        "decision ok": send(
            small, DECIDE.format(request_id), body({"verdict": "approve"}), cfg.ALICE
        ),
    }
    assert lean.answered - before == {"gate": 2, "decision": 2}
    for what, reply in replies.items():
        assert reply.header("x-request-id") == "lean-test-1", what
        assert [reply.header(n.decode()) for n, _ in SECURITY_HEADERS] == [
            v.decode() for _, v in SECURITY_HEADERS
        ], what
        assert reply.header("content-type") == "application/json", what
        assert int(reply.header("content-length") or -1) == len(reply.body), what
    # without an X-Request-ID (or with one that is not printable) a fresh ULID each time
    fresh = [
        send(small, "/v1/gate", body({"tool_name": "read_file"}), cfg.AGENT, X_Request_ID=rid)
        for rid in ("", "bad\tid")
    ]
    ids = {r.header("x-request-id") for r in fresh}
    assert len(ids) == 2 and all(len(i or "") == 26 for i in ids)


def test_openapi_still_documents_both_routes(small: Gate) -> None:
    with small.client() as c:
        spec = c.get("/openapi.json").json()
    gate_op = spec["paths"]["/v1/gate"]["post"]
    decision_op = spec["paths"]["/v1/requests/{request_id}/decision"]["post"]
    assert gate_op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/GateCall"
    )
    assert gate_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/GateAnswer"
    )
    assert decision_op["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/DecisionBody"
    )
    assert {"401", "403", "404", "409", "413", "422"} <= set(decision_op["responses"])


def test_only_plain_requests_of_the_two_routes_are_taken(small: Gate) -> None:
    lean = lean_routes(small)
    request_id = ask(small)
    before = +lean.answered, +lean.handed_over
    with small.client(cfg.ALICE) as c:
        assert c.post(f"/v1/requests/{request_id}/extend", json={"by": "5m"}).status_code == 200
        assert c.post(f"/v1/requests/{request_id}/decision/", json={}).status_code in (307, 404)
        assert c.put(f"/v1/requests/{request_id}/decision", json={}).status_code == 405
        assert c.post("/v1/gate/", json={}).status_code in (307, 404)
    assert (+lean.answered, +lean.handed_over) == before


def test_a_client_gone_mid_body_is_handed_over_and_the_server_carries_on(
    small: Gate, route: tuple[str, str, str, list[bytes]]
) -> None:
    name, path, token, (whole,) = route
    lean = lean_routes(small)
    before = lean.handed_over[name]
    with socket.create_connection(("127.0.0.1", small.server.port), timeout=10) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(whole) + 100}\r\n\r\n"
        )
        sock.sendall(head.encode() + whole[:5])
        time.sleep(0.1)
    deadline = time.monotonic() + 10
    while lean.handed_over[name] == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lean.handed_over[name] == before + 1  # the stack saw the disconnect, as it would
    served = send(small, path, [whole], token)
    assert served.status == 200, served.body
