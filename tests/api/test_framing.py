"""HTTP framing: an answer sent before a request's body was read cannot desynchronise the
connection (issue 28, item 8).

gate's own server (`GateServer` with `server_config`, each of uvicorn's two parsers) in a
thread, spoken to over raw sockets so the test controls the framing. For each way a request
is refused, the refused request and a valid one go on one connection, one after the other
and pipelined: the stream from the server must hold the refusal and then either the valid
request's own answer (its `X-Request-ID` echoed) or a clean end of stream after a refusal
saying `Connection: close`, never anything else; and the valid request retried on a new
connection is answered.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gate.app import create_app
from gate.config.settings import Settings
from gate.server.serve import GateServer, listen, server_config
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite

BIG = 600_000  # over the 256 KiB body limit


@dataclass
class Served:
    """A `GateServer` in a thread (its port)."""

    port: int
    server: GateServer
    thread: threading.Thread


def _serve(tmp_path: Path, parser: str, **server: object) -> Iterator[Served]:
    settings = Settings(
        **cfg.settings_data(migrated_sqlite(tmp_path / "gate.db"), **server)  # type: ignore[arg-type]
    )
    sock = listen("127.0.0.1", 0)
    app = create_app(settings)
    gs = GateServer(server_config(app, settings, parser=parser))
    thread = threading.Thread(target=gs.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not gs.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield Served(sock.getsockname()[1], gs, thread)
    finally:
        gs.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(params=["auto", "h11"], ids=["httptools", "h11"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    """gate's server, with httptools (what `gate serve` picks) and with h11."""
    yield from _serve(tmp_path, request.param, request_read_timeout_seconds=1.0)


# -- requests -------------------------------------------------------------------------------


def _post(path: str, body: bytes, *headers: str, length: bool = True) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    if length:
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _json_post(path: str, body: bytes, *headers: str) -> bytes:
    return _post(
        path,
        body,
        "Content-Type: application/json",
        f"Authorization: Bearer {cfg.AGENT}",
        *headers,
    )


def _chunked(body: bytes, size: int = 16384) -> bytes:
    out = b"".join(
        b"%x\r\n" % len(body[i : i + size]) + body[i : i + size] + b"\r\n"
        for i in range(0, len(body), size)
    )
    return out + b"0\r\n\r\n"


def _big_call(size: int = BIG) -> bytes:
    return json.dumps({"tool_name": "read_x", "tool_args": {"pad": "a" * size}}).encode()


def valid(rid: str) -> bytes:
    """An ask that policy allows at once (no database), tagged with its own request id."""
    body = json.dumps({"tool_name": "read_file", "tool_args": {"path": "a"}}).encode()
    return _json_post("/v1/gate", body, f"X-Request-ID: {rid}")


#: each way of refusing a request with a body, as (name, the refused request's bytes,
#: the status it gets)
REFUSALS: list[tuple[str, bytes, int]] = [
    (
        "413 by Content-Length (lean route hands over, the envelope refuses)",
        _json_post("/v1/gate", _big_call()),
        413,
    ),
    (
        "413 while streaming chunks",
        _post(
            "/v1/gate",
            _chunked(_big_call()),
            "Content-Type: application/json",
            f"Authorization: Bearer {cfg.AGENT}",
            "Transfer-Encoding: chunked",
            length=False,
        ),
        413,
    ),
    (
        "413 on a decision (lean route)",
        _post(
            "/v1/requests/01ABC/decision",
            _big_call(),
            "Content-Type: application/json",
            f"Authorization: Bearer {cfg.ALICE}",
        ),
        413,
    ),
    (
        "413 off the lean routes",
        _post("/v1/requests/01ABC/cancel", _big_call(), "Content-Type: application/json"),
        413,
    ),
    ("400 for a NUL in the URL", _json_post("/v1/gate?x=%00", _big_call(100_000)), 400),
    (
        "403 cross-site, refused by the guard before the body",
        _post(
            "/requests/01ABC/decide",
            b"verdict=approve&pad=" + b"a" * 200_000,
            "Content-Type: application/x-www-form-urlencoded",
            "Origin: http://evil.example",
        ),
        403,
    ),
    (
        "401 from the lean route (after the body)",
        _post(
            "/v1/gate",
            _big_call(200_000),
            "Content-Type: application/json",
            "Authorization: Bearer not-a-token",
        ),
        401,
    ),
    (
        "401 off the lean routes",
        _post(
            "/v1/requests/01ABC/cancel",
            b'{"reason": "' + b"a" * 200_000 + b'"}',
            "Content-Type: application/json",
            "Authorization: Bearer not-a-token",
        ),
        401,
    ),
    ("422 for a body that is not the schema", _json_post("/v1/gate", b'{"tool_args": 1}'), 422),
    ("400 for a body that is not JSON", _json_post("/v1/gate", b'{"tool_name": '), 400),
]


# -- reading responses ----------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Stream:
    """Everything the server wrote on one connection, and how it ended."""

    responses: list[Response] = field(default_factory=list)
    ended: str = "open"  # "eof", "reset" or "open" (still open when the test stopped reading)
    rest: bytes = b""


def parse(data: bytes) -> tuple[list[Response], bytes]:
    """The complete responses in `data` (Content-Length framed, as gate sends), and the rest."""
    out = []
    while b"\r\n\r\n" in data:
        head, _, after = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        size = int(headers.get("content-length", "0"))
        if len(after) < size:
            break
        out.append(Response(status, headers, after[:size]))
        data = after[size:]
    return out, data


def read_stream(s: socket.socket, want: int, within: float = 8.0) -> Stream:
    """Read until `want` responses came, or the server ended the stream, or `within` passed."""
    data = b""
    stream = Stream()
    deadline = time.monotonic() + within
    s.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            if len(parse(data)[0]) >= want:
                break
            continue
        except ConnectionResetError:
            stream.ended = "reset"
            break
        if not chunk:
            stream.ended = "eof"
            break
        data += chunk
    stream.responses, stream.rest = parse(data)
    return stream


def send_all(s: socket.socket, data: bytes) -> bool:
    """Send what the server still reads; False when it stopped reading (it closed)."""
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def answered_on_a_new_connection(port: int, rid: str) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(valid(rid))
        stream = read_stream(s, 1)
    check_valid(stream.responses[0], rid)


def check_valid(response: Response, rid: str) -> None:
    assert response.status == 200, response
    assert response.headers["x-request-id"] == rid
    assert json.loads(response.body)["decision"] == "allow"


def check_stream(stream: Stream, status: int, rid: str) -> bool:
    """The refusal, then the valid answer or a clean close; True when the valid one was
    answered on this connection."""
    assert stream.rest == b"", f"bytes that are no response: {stream.rest[:200]!r}"
    assert stream.responses, f"no answer at all ({stream.ended})"
    refusal, *others = stream.responses
    assert refusal.status == status, refusal
    assert json.loads(refusal.body)["error"]["code"]
    if not others:
        # Not answered here: the refusal said so, and the stream ended cleanly.
        assert refusal.headers.get("connection") == "close", refusal.headers
        assert stream.ended == "eof", stream.ended
        return False
    assert len(others) == 1, [r.status for r in stream.responses]
    check_valid(others[0], rid)
    return True


# -- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "refused", "status"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_refused_request_then_a_valid_one_on_one_connection(
    served: Served, name: str, refused: bytes, status: int
) -> None:
    for attempt in range(3):
        rid = f"valid-seq-{attempt}"
        with socket.create_connection(("127.0.0.1", served.port), timeout=5) as s:
            send_all(s, refused)
            first = read_stream(s, 1)
            assert first.responses and first.responses[0].status == status, (name, first)
            kept = first.responses[0].headers.get("connection") != "close"
            if kept:
                assert send_all(s, valid(rid))
                second = read_stream(s, 1)
                stream = Stream(first.responses + second.responses, second.ended, second.rest)
            else:
                # The client sees "close", so it does not send here; whatever it might send
                # anyway is not read as a request.
                send_all(s, valid(rid))
                rest = read_stream(s, 1)
                stream = Stream(
                    first.responses + rest.responses, rest.ended, first.rest + rest.rest
                )
            if not check_stream(stream, status, rid):
                answered_on_a_new_connection(served.port, rid)


@pytest.mark.parametrize(("name", "refused", "status"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_a_refused_request_and_a_valid_one_pipelined(
    served: Served, name: str, refused: bytes, status: int
) -> None:
    for attempt in range(3):
        rid = f"valid-pipelined-{attempt}"
        with socket.create_connection(("127.0.0.1", served.port), timeout=5) as s:
            send_all(s, refused + valid(rid))
            stream = read_stream(s, 2)
        if not check_stream(stream, status, rid):
            answered_on_a_new_connection(served.port, rid)


def test_an_answer_after_the_whole_body_keeps_the_connection(served: Served) -> None:
    """A refusal that came after the body was read keeps the connection for the next one."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as s:
        for i in range(3):
            assert send_all(s, _json_post("/v1/gate", b'{"tool_args": 1}') + valid(f"k{i}"))
            stream = read_stream(s, 2)
            assert [r.status for r in stream.responses] == [422, 200], stream
            assert "connection" not in stream.responses[0].headers
            check_valid(stream.responses[1], f"k{i}")


def test_oversized_headers_end_the_connection_cleanly(served: Served) -> None:
    pad = "X-Pad: " + "a" * 8000
    refused = _json_post("/v1/gate", b"{}", *[pad] * 12)
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as s:
        send_all(s, refused + valid("after-431"))
        stream = read_stream(s, 2)
    assert [r.status for r in stream.responses] in ([431], [400]), stream
    assert stream.ended == "eof"
    answered_on_a_new_connection(served.port, "after-431")


def test_a_stalled_body_is_not_read_as_the_next_request(served: Served) -> None:
    """A body that stops half-way is cut at the read deadline; what follows is never a request."""
    body = _big_call(10_000)
    head = _json_post("/v1/gate", body)[: -len(body) // 2]
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as s:
        send_all(s, head)
        time.sleep(1.5)  # past the one-second read deadline
        send_all(s, valid("after-stall"))
        stream = read_stream(s, 1)
    assert all(r.status != 200 for r in stream.responses), stream
    assert stream.ended in ("eof", "reset")
    answered_on_a_new_connection(served.port, "after-stall")


def test_a_client_that_keeps_sending_is_cut_off(tmp_path: Path) -> None:
    """After the 413, gate drains a body still coming for a bounded time, then closes."""
    head = _post(
        "/v1/gate",
        b"",
        "Content-Type: application/json",
        f"Authorization: Bearer {cfg.AGENT}",
        "Content-Length: 100000000",
        length=False,
    )
    for served in _serve(tmp_path, "auto"):
        with socket.create_connection(("127.0.0.1", served.port), timeout=5) as s:
            s.sendall(head)
            started = time.monotonic()
            got = b""
            s.settimeout(0.2)
            closed = False
            while not closed and time.monotonic() - started < 20:
                try:
                    s.sendall(b"a" * 65536)
                    got += s.recv(65536)
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
            assert closed, "gate kept reading a refused body"
            assert got.startswith(b"HTTP/1.1 413 "), got[:100]
            assert time.monotonic() - started < 15
