"""Silent, half-sent and surplus sockets against a real `gate serve`: agents still get through.

Each test opens a few hundred loopback sockets (bounded, closed in `finally`) to a server whose
gate.toml sets a one-second read deadline, and checks what the server does with them.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from gate.config.settings import Settings
from gate.server.serve import connection_cap, reserved_fds
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS
from tests.support.servers import ServerProcess

READ_TIMEOUT = 1.0
SILENT = 150
HALF_SENT = 150
HALF_REQUEST = (
    b"POST /v1/gate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer "
)


def _server(tmp_path: Path, read_timeout: float) -> ServerProcess:
    path = cfg.write_config(
        tmp_path / "gate.toml",
        migrated_sqlite(tmp_path / "gate.db"),
        request_read_timeout_seconds=read_timeout,
        keep_alive_timeout_seconds=1,
    )
    return ServerProcess(path)


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`gate serve` with a one-second read deadline, started once for the module's tests.

    A start is a second and a half of CPU (a process importing gate). The tests share it: each
    one's sockets are closed by its end (by the server, or in `finally`), and each checks the
    server as it finds it, so what one test does cannot pass or fail another.
    """
    server = _server(tmp_path_factory.mktemp("serve"), READ_TIMEOUT)
    try:
        yield server.start()
    finally:
        server.stop()


@contextmanager
def sockets(port: int, count: int, first_bytes: bytes = b"") -> Iterator[list[socket.socket]]:
    """`count` connected sockets that send `first_bytes` (maybe nothing) and then go quiet."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            if first_bytes:
                s.sendall(first_bytes)
            opened.append(s)
        yield opened
    finally:
        for s in opened:
            s.close()


def closed_by_server(opened: list[socket.socket], within: float) -> tuple[list[bytes], float]:
    """Read each socket until the server closes it; (what each got, seconds it took)."""
    started = time.monotonic()
    deadline = started + within
    got = dict.fromkeys(opened, b"")
    open_ = set(opened)
    while open_ and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_), [], [], 0.2)
        for s in ready:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                chunk = b""
            if chunk:
                got[s] += chunk
            else:
                open_.discard(s)
    assert not open_, f"{len(open_)} socket(s) still open after {within} s"
    return [got[s] for s in opened], time.monotonic() - started


def agent_round_trip(url: str) -> None:
    """An agent asks, an approver decides, the agent's wait sees it."""
    with httpx.Client(base_url=url, timeout=10, verify=TLS) as agent:
        asked = agent.post(
            "/v1/gate",
            json={"tool_name": "pay_vendor", "tool_args": {"amount": 60000}, "user_id": "dave"},
            headers={"Authorization": f"Bearer {cfg.AGENT}"},
        )
        assert asked.status_code == 200, asked.text
        request_id = asked.json()["request"]["id"]
        decided = agent.post(
            f"/v1/requests/{request_id}/decision",
            json={"verdict": "approve"},
            headers={"Authorization": f"Bearer {cfg.ALICE}"},
        )
        assert decided.status_code == 200, decided.text
        waited = agent.get(
            f"/v1/requests/{request_id}/wait",
            params={"timeout": 5},
            headers={"Authorization": f"Bearer {cfg.AGENT}"},
        )
        assert waited.json()["status"] == "approved"


def test_silent_and_half_sent_sockets_are_closed_and_lock_nobody_out(
    serve: ServerProcess,
) -> None:
    with (
        sockets(serve.port, SILENT) as silent,
        sockets(serve.port, HALF_SENT, HALF_REQUEST) as half,
    ):
        agent_round_trip(serve.url)  # while 300 sockets hang on
        answers, took = closed_by_server(silent + half, within=READ_TIMEOUT + 10)
    # Silent sockets are just closed; a half-sent request is told why.
    assert all(a == b"" for a in answers[:SILENT])
    for answer in answers[SILENT:]:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert json.loads(body)["error"]["code"] == "request_timeout"
    assert took < READ_TIMEOUT + 5
    agent_round_trip(serve.url)
    assert "Too many open files" not in serve.log()


def test_a_slow_sender_does_not_restart_the_clock(serve: ServerProcess) -> None:
    """Slowloris: a byte every 0.2 s keeps the socket busy, but the deadline is per request."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    with socket.create_connection(("127.0.0.1", serve.port), timeout=5) as s:
        started = time.monotonic()
        sent = 0
        try:
            # 200 bytes a byte every 0.2 s would take 40 s; the bounds below leave room for a
            # loaded machine (CI once saw the 408 after 6 s) and still tell the two apart.
            while sent < len(request) and time.monotonic() - started < READ_TIMEOUT + 12:
                s.sendall(request[sent : sent + 1])
                sent += 1
                time.sleep(0.2)
        except (BrokenPipeError, ConnectionResetError):
            pass
        closed_after = time.monotonic() - started
        s.settimeout(2)
        try:
            answer = s.recv(4096)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    assert sent < len(request), "the server kept reading a request sent a byte at a time"
    assert closed_after < READ_TIMEOUT + 10
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408 ")


def test_a_kept_alive_connection_stays_usable(serve: ServerProcess) -> None:
    with httpx.Client(base_url=serve.url, timeout=5, verify=TLS) as c:
        for _ in range(3):
            assert c.get("/healthz").status_code == 200
            time.sleep(READ_TIMEOUT * 0.6)  # idle, but under keep-alive


def test_huge_headers_are_refused(serve: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", serve.port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            for _ in range(20):
                s.sendall(b"X-Pad: " + b"a" * 8000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.settimeout(5)
        answer = s.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431 ") or answer.startswith(b"HTTP/1.1 400 "), answer[:100]


def test_connections_are_capped_below_the_open_file_limit(tmp_path: Path) -> None:
    """With `ulimit -n 400`, gate holds fewer sockets than that and refuses the rest at once."""
    # Long enough that no held socket times out while the flood is still being opened.
    read_timeout = 5.0
    serve = _server(tmp_path, read_timeout)
    try:
        _flood_over_the_cap(serve, read_timeout)
    finally:
        serve.stop()


def _flood_over_the_cap(serve: ServerProcess, read_timeout: float) -> None:
    nofile = 400
    serve.nofile = nofile  # soft and hard: gate serve raises a soft limit to the hard one
    serve.start()
    settings = Settings(**cfg.settings_data("sqlite:///x.db"))
    cap = connection_cap(settings, nofile)
    assert cap == nofile - reserved_fds(settings)
    assert f"at most {cap} at once" in serve.log()
    flood = cap + 40
    with sockets(serve.port, flood) as opened:
        refused = []
        for s in opened[-30:]:
            ready, _, _ = select.select([s], [], [], 2)
            answer = s.recv(4096) if ready else b""
            refused.append(answer)
        for answer in refused:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 "), answer[:200]
            assert json.loads(body)["error"]["code"] == "too_many_connections"
        # The silent ones that got in are closed at the read deadline; then agents get in.
        closed_by_server(opened, within=read_timeout + 10)
        agent_round_trip(serve.url)
    log = serve.log()
    assert "Too many open files" not in log
    assert "Traceback" not in log
