"""Waiting never blocks deciding (issue 28, item 7).

Parked long-polls may hold the connection cap minus a reserve: with waiting full, a decision,
an ask and the console still get through, and a long-poll over it is refused at once with
503 `too_many_waiters` and a `Retry-After` that `gate hook` and the SDK follow within their
deadline. The default cap follows the open-file limit, which `gate serve` raises first.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate.api.lean import GateAPI
from gate.asking.askflow import decide as ask_flow
from gate.asking.exchange import drive
from gate.asking.toolcall import Call, Verdict
from gate.client import GateClient
from gate.config.settings import Settings
from gate.hook.command import urllib_sender
from gate.server.capacity import (
    DEFAULT_CEILING,
    WAIT_RETRY_SECONDS,
    Capacity,
    connection_cap,
    connection_reserve,
    reserved_fds,
)
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS
from tests.support.servers import ServerProcess, wait_until

# -- the numbers ----------------------------------------------------------------------------


def settings(**server: Any) -> Settings:
    return Settings(**cfg.settings_data("sqlite:///x.db", **server))


def test_the_default_cap_follows_the_open_file_limit() -> None:
    default = settings()
    assert default.server.max_connections is None
    fds = reserved_fds(default)
    assert connection_cap(default, 20_000) == 20_000 - fds
    assert connection_cap(default, 1024) == 1024 - fds
    assert connection_cap(default, 10_000_000) == DEFAULT_CEILING
    assert connection_cap(default, None) == DEFAULT_CEILING
    # A setting overrides it, still lowered to fit under the limit.
    assert connection_cap(settings(max_connections=500), 20_000) == 500
    assert connection_cap(settings(max_connections=5000), 1024) == 1024 - fds


def test_the_reserve_is_a_share_of_the_cap_unless_set() -> None:
    default = settings()
    assert connection_reserve(default, 19_891) == 1989
    assert connection_reserve(default, 200) == 32  # at least 32
    assert connection_reserve(default, 40) == 20  # at most half
    assert connection_reserve(settings(reserved_connections=5), 100) == 5
    capacity = Capacity.of(default, 20_000)
    assert capacity.waits == capacity.connections - capacity.reserve >= 10_000


def test_a_reserve_as_large_as_the_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="reserved_connections"):
        settings(max_connections=100, reserved_connections=100)


def test_gate_serve_raises_its_open_file_limit(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 1024:
        pytest.skip("needs a finite hard open-file limit above 1024")
    path = cfg.write_config(tmp_path / "gate.toml", migrated_sqlite(tmp_path / "gate.db"))
    server = ServerProcess(path)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # inherited by the child
    try:
        server.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert server.proc is not None
        limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        assert line.split()[3:5] == [str(hard), str(hard)], line
        cap = min(hard - reserved_fds(settings()), DEFAULT_CEILING)
        assert f"at most {cap} at once" in server.log()
    finally:
        server.stop()


# -- the reserve holds (a real `gate serve`) ------------------------------------------------

CAP = 64
RESERVE = 32  # the default for a cap of 64: at least 32, at most half


@pytest.fixture
def small(tmp_path: Path) -> Iterator[ServerProcess]:
    """`gate serve` with a connection cap of 64 (32 of them for long-polls)."""
    path = cfg.write_config(
        tmp_path / "gate.toml", migrated_sqlite(tmp_path / "gate.db"), max_connections=CAP
    )
    server = ServerProcess(path).start()
    try:
        yield server
    finally:
        server.stop()


def park(port: int, request_id: str, n: int) -> list[socket.socket]:
    """`n` long-polls of `request_id`, sent and left waiting."""
    opened = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(
            f"GET /v1/requests/{request_id}/wait?timeout=60 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {cfg.AGENT}\r\n\r\n".encode()
        )
        opened.append(s)
    return opened


def read_answer(s: socket.socket) -> tuple[int, dict[str, str], Any]:
    """One Content-Length framed answer: status, headers, JSON body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += s.recv(65536)
    return int(lines[0].split()[1]), headers, json.loads(body)


def ask(client: httpx.Client, tool: str) -> str:
    r = client.post(
        "/v1/gate",
        json={"tool_name": tool, "tool_args": {}},
        headers={"Authorization": f"Bearer {cfg.AGENT}"},
    )
    assert r.status_code == 200, r.text
    return str(r.json()["request"]["id"])


def test_waiters_filling_their_share_leave_room_to_ask_decide_and_sign_in(
    small: ServerProcess,
) -> None:
    with httpx.Client(base_url=small.url, timeout=10, verify=TLS) as client:
        parked_id = ask(client, "ask_parked")
        other_id = ask(client, "ask_other")
        waiting = park(small.port, parked_id, CAP - RESERVE)
        try:
            time.sleep(1)  # every one of them parked
            # One more long-poll is refused at once, with when to come back.
            (extra,) = park(small.port, parked_id, 1)
            with extra:
                status, headers, body = read_answer(extra)
                assert status == 503
                assert body["error"]["code"] == "too_many_waiters"
                assert WAIT_RETRY_SECONDS[0] <= int(headers["retry-after"]) <= WAIT_RETRY_SECONDS[1]
                assert body["error"]["retry_after"] == int(headers["retry-after"])
                assert headers["connection"] == "close"
                assert extra.recv(1) == b""  # and the connection is freed
            # The reserve: an approver decides, an agent asks, the console answers.
            started = time.monotonic()
            decided = client.post(
                f"/v1/requests/{other_id}/decision",
                json={"verdict": "approve"},
                headers={"Authorization": f"Bearer {cfg.ALICE}"},
            )
            assert decided.status_code == 200, decided.text
            assert time.monotonic() - started < 1.0
            ask(client, "ask_more")
            assert client.get("/login").status_code == 200
            assert client.get("/healthz").status_code == 200
            # The parked waiters were never disturbed: the decision reaches each of them.
            decided = client.post(
                f"/v1/requests/{parked_id}/decision",
                json={"verdict": "approve"},
                headers={"Authorization": f"Bearer {cfg.ALICE}"},
            )
            assert decided.status_code == 200, decided.text
            for s in waiting:
                status, _, body = read_answer(s)
                assert (status, body["status"]) == (200, "approved")
        finally:
            for s in waiting:
                s.close()
    assert "Traceback" not in small.log()


# -- the hook and the SDK follow the hint ----------------------------------------------------


@pytest.fixture
def one_waiter(make_gate: GateFactory) -> Gate:
    """A gate whose long-polls may hold a single connection."""
    return make_gate(max_connections=16, reserved_connections=15)


def capacity_of(gate: Gate) -> Capacity:
    app = gate.server.app
    assert isinstance(app, GateAPI) and app.lean_routes is not None
    capacity = app.lean_routes.capacity
    assert capacity.waits == 1
    return capacity


def occupy(gate: Gate) -> tuple[str, socket.socket]:
    """A pending request with the one waiting place taken by a long-poll of it."""
    with gate.client() as c:
        request_id = ask(c, "ask_occupy")
    (s,) = park(gate.server.port, request_id, 1)
    wait_until(lambda: capacity_of(gate).held == 1)
    return request_id, s


def approve(gate: Gate, request_id: str) -> None:
    with gate.client(cfg.ALICE) as c:
        r = c.post(f"/v1/requests/{request_id}/decision", json={"verdict": "approve"})
        assert r.status_code == 200, r.text


def pending_of(gate: Gate, tool: str) -> str:
    with gate.client(cfg.ADMIN) as c:
        found = c.get("/v1/requests", params={"status": "pending"}).json()
    items = found["items"] if isinstance(found, dict) else found
    ids = [r["id"] for r in items if r["tool_name"] == tool]
    return str(ids[0]) if ids else ""


def run_refused_then_freed(gate: Gate, tool: str, waiter: Any) -> Any:
    """Run `waiter()` in a thread while waiting is full; once it was refused, free the place,
    then approve its request. Its result."""
    capacity = capacity_of(gate)
    occupied, s = occupy(gate)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(waiter()), daemon=True)
    with s:
        thread.start()
        wait_until(lambda: capacity.refused >= 1, timeout=15)
        assert thread.is_alive(), result  # refused, and still waiting
        approve(gate, occupied)  # the parked long-poll returns: its place is free
        read_answer(s)
    request_id = wait_until(lambda: pending_of(gate, tool), timeout=15)
    wait_until(lambda: capacity.held == 1, timeout=15)  # the retry parked
    approve(gate, request_id)
    thread.join(timeout=30)
    assert result, "the waiter did not finish"
    return result[0]


def test_the_hook_waits_and_retries_when_refused_for_capacity(one_waiter: Gate) -> None:
    gate = one_waiter

    def hook() -> Verdict:
        flow = ask_flow(Call("ask_hook", {"n": 1}), url=gate.server.url, limit=60)
        return drive(flow, urllib_sender(gate.server.url, cfg.AGENT))

    verdict = run_refused_then_freed(gate, "ask_hook", hook)
    assert verdict.kind == "approved", verdict


def test_the_sdk_check_waits_and_retries_when_refused_for_capacity(one_waiter: Gate) -> None:
    gate = one_waiter

    def check() -> Verdict:
        with GateClient(gate.server.url, cfg.AGENT, timeout=60) as client:
            return client.check("ask_sdk", {"n": 1})

    verdict = run_refused_then_freed(gate, "ask_sdk", check)
    assert verdict.kind == "approved", verdict


def test_the_sdk_wait_retries_within_its_timeout(one_waiter: Gate) -> None:
    gate = one_waiter
    with gate.client() as c:
        request_id = ask(c, "ask_raw")

    def wait() -> Any:
        with GateClient(gate.server.url, cfg.AGENT) as client:
            return client.wait(request_id, timeout=30)

    def ask_raw_pending() -> str:
        return request_id

    capacity = capacity_of(gate)
    occupied, s = occupy(gate)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(wait()), daemon=True)
    with s:
        thread.start()
        wait_until(lambda: capacity.refused >= 1, timeout=15)
        approve(gate, occupied)
        read_answer(s)
    wait_until(lambda: capacity.held == 1, timeout=15)
    approve(gate, ask_raw_pending())
    thread.join(timeout=30)
    assert result and result[0]["status"] == "approved"


def test_the_sdk_wait_out_of_time_returns_the_request_still_pending(one_waiter: Gate) -> None:
    gate = one_waiter
    with gate.client() as c:
        request_id = ask(c, "ask_raw")
    _, s = occupy(gate)
    with s, GateClient(gate.server.url, cfg.AGENT) as client:
        started = time.monotonic()
        answer = client.wait(request_id, timeout=0.5)
        took = time.monotonic() - started
    assert answer["id"] == request_id and answer["status"] == "pending"
    assert took < 5
    assert capacity_of(gate).refused >= 1


async def test_the_async_sdk_wait_retries_too(one_waiter: Gate) -> None:
    gate = one_waiter
    with gate.client() as c:
        request_id = ask(c, "ask_async")
    capacity = capacity_of(gate)
    occupied, s = occupy(gate)
    async with GateClient(gate.server.url, cfg.AGENT) as client:
        task = asyncio.create_task(client.wait_async(request_id, timeout=30))
        while capacity.refused < 1:
            await asyncio.sleep(0.05)
        with s:
            await asyncio.to_thread(approve, gate, occupied)
            await asyncio.to_thread(read_answer, s)
        while capacity.held < 1:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(approve, gate, request_id)
        answer = await asyncio.wait_for(task, 30)
    assert answer["status"] == "approved"
