"""Sign-in cannot be guessed at speed or starve the API, and sign-out is final.

Attempts are limited per client address and per name; checks run on their own two threads
with a bounded queue; an unknown name costs a real argon2 verify like a wrong password; a
signed-out cookie replayed later is refused on every replica and after a restart.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import httpx
from argon2 import PasswordHasher, extract_parameters
from pydantic import SecretStr

from gate.base.statuses import utcnow
from gate.config.settings import Settings
from gate.identity.auth import PasswordCheck
from gate.store.db import Database
from gate.web.pages import SIGN_IN_RECHECK_SECONDS
from gate.web.signin import (
    CLIENT_BURST,
    MAX_WAITING,
    NAME_BURST,
    PASSWORD_THREADS,
    SignInLimiter,
)
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.web.conftest import (
    PASSWORDS,
    WebGateFactory,
    browser,
    csrf_of,
    sign_in,
    web_settings,
)


def _attempt(
    gate: Gate, username: str, password: str, *, client: str, client_obj: httpx.Client | None = None
) -> httpx.Response:
    """One sign-in form post from `client` (the address a trusted proxy reports)."""
    c = client_obj or browser(gate)
    try:
        token = csrf_of(c.get("/login").text)
        return c.post(
            "/login",
            data={"username": username, "password": password, "csrf_token": token},
            headers={"X-Forwarded-For": client},
        )
    finally:
        if client_obj is None:
            c.close()


# -- rate limits ------------------------------------------------------------------------------


def test_one_client_is_limited_whatever_names_it_tries(web_gate: Gate) -> None:
    guesser = "203.0.113.7"
    with browser(web_gate) as c:
        for i in range(CLIENT_BURST):
            r = _attempt(web_gate, f"user{i}", "guess", client=guesser, client_obj=c)
            assert r.status_code == 401, (i, r.text)
        r = _attempt(web_gate, "alice", PASSWORDS["alice"], client=guesser, client_obj=c)
        assert r.status_code == 429
        assert "Too many sign-in attempts" in r.text
        assert int(r.headers["retry-after"]) > 0
        assert c.get("/").status_code == 303  # not signed in, even with the right password
    # Another address is not held back by this one.
    r = _attempt(web_gate, "alice", PASSWORDS["alice"], client="198.51.100.20")
    assert r.status_code == 303


def test_one_name_is_limited_whichever_clients_try_it(web_gate: Gate) -> None:
    for i in range(NAME_BURST):
        name = "bob" if i % 2 else " BOB "  # the same account, however it is typed
        r = _attempt(web_gate, name, "guess", client=f"192.0.2.{i + 1}")
        assert r.status_code == 401, r.text
    r = _attempt(web_gate, "bob", PASSWORDS["bob"], client="192.0.2.200")
    assert r.status_code == 429
    # Other names from those addresses are fine.
    assert _attempt(web_gate, "alice", PASSWORDS["alice"], client="192.0.2.1").status_code == 303


def test_successful_sign_ins_cost_nothing(web_gate: Gate) -> None:
    for _ in range(CLIENT_BURST + NAME_BURST):
        r = _attempt(web_gate, "carol", PASSWORDS["carol"], client="198.51.100.9")
        assert r.status_code == 303, r.text


def test_password_checks_run_on_their_own_bounded_pool(
    make_gate: GateFactory, sqlite_url: str
) -> None:
    """A burst of sign-ins queues for two threads, sheds the excess, and the API answers."""
    # Each check is tens of milliseconds of real argon2 work (32 MiB, two passes).
    hasher = PasswordHasher(time_cost=2, memory_cost=32 * 1024, parallelism=1)
    settings = web_settings(sqlite_url)
    for approver in settings.approvers:
        approver.password_hash = SecretStr(hasher.hash("x"))
    gate = make_gate(settings=settings)
    burst = PASSWORD_THREADS + MAX_WAITING + 16
    clients = [browser(gate) for _ in range(burst)]
    tokens = [csrf_of(c.get("/login").text) for c in clients]
    start = threading.Barrier(burst + 1)

    def one(i: int) -> int:
        # A name and an address each: no rate limit applies, every one needs a check.
        form = {"username": f"user{i}", "password": "guess", "csrf_token": tokens[i]}
        start.wait()
        r = clients[i].post("/login", data=form, headers={"X-Forwarded-For": f"10.9.0.{i + 1}"})
        return r.status_code

    api_times: list[float] = []
    try:
        with ThreadPoolExecutor(max_workers=burst) as pool, gate.client(cfg.ADMIN) as api:
            futures = [pool.submit(one, i) for i in range(burst)]
            start.wait()  # all posts leave at once
            while not all(f.done() for f in futures):
                started = time.perf_counter()
                assert api.get("/v1/requests").status_code == 200
                api_times.append(time.perf_counter() - started)
            statuses = [f.result() for f in futures]
    finally:
        for c in clients:
            c.close()
    # Checked (401), or shed when the queue was full (503): whether any are shed depends on how
    # fast the posts arrive, which the next test pins down without timing.
    assert set(statuses) <= {401, 503}, statuses
    assert statuses.count(401) >= PASSWORD_THREADS
    # The API's threads were never taken: its calls answered while sign-ins queued.
    assert api_times and statistics.median(api_times) < 1.0, api_times


def test_the_password_pool_has_two_threads_a_bounded_queue_and_spares_the_api() -> None:
    """Fill the sign-in pool with real blocked threads: two run, the queue is full, and a
    call on the API's own thread pool still runs at once."""
    running: list[int] = []
    release = threading.Event()

    def check() -> None:  # stands in for argon2: holds a real pool thread until released
        running.append(1)
        release.wait(10)

    async def scenario() -> None:
        # its pool alone is used here: the database is never opened
        limiter = SignInLimiter(Database("sqlite:///unused.db"), utcnow)

        async def sign_in_check() -> None:
            await anyio.to_thread.run_sync(check, limiter=limiter.pool)

        async with anyio.create_task_group() as group:
            for _ in range(PASSWORD_THREADS + MAX_WAITING):
                group.start_soon(sign_in_check)
            # Wait for both: a worker thread is handed its call some time after the limiter
            # lends it a token, so "the queue is full" alone does not mean both have started.
            with anyio.fail_after(10):
                while (
                    limiter.pool.statistics().tasks_waiting < MAX_WAITING
                    or len(running) < PASSWORD_THREADS
                ):
                    await anyio.sleep(0.01)
            assert limiter.pool.borrowed_tokens == PASSWORD_THREADS
            assert len(running) == PASSWORD_THREADS  # the queued ones have not started
            assert limiter.busy  # the next sign-in is told to retry, not queued
            started = time.perf_counter()
            assert await anyio.to_thread.run_sync(lambda: "the API answers") == "the API answers"
            assert time.perf_counter() - started < 1.0
            release.set()
        assert not limiter.busy
        assert len(running) == PASSWORD_THREADS + MAX_WAITING

    try:
        # In a thread of its own: the test thread may hold tests/web's browser, whose
        # Playwright marks an event loop running there (tests/support/browser.py `launched`).
        with ThreadPoolExecutor(max_workers=1) as own:
            own.submit(anyio.run, scenario).result()
    finally:
        release.set()


# -- unknown names cost a real verify ---------------------------------------------------------


def test_an_unknown_name_costs_what_a_wrong_password_costs(sqlite_url: str) -> None:
    # Parameters unlike the library's defaults: a fixed default-parameter dummy would differ.
    hasher = PasswordHasher(time_cost=2, memory_cost=32 * 1024, parallelism=1)
    data = cfg.settings_data(sqlite_url)
    for approver in data["approvers"]:
        approver["password_hash"] = hasher.hash("the right one")
    check = PasswordCheck(Settings(**data))
    params = extract_parameters(check.dummy)
    assert (params.time_cost, params.memory_cost, params.parallelism) == (2, 32 * 1024, 1)

    def timed(name: str) -> float:
        started = time.perf_counter()
        assert check(name, "a wrong password") is None
        return time.perf_counter() - started

    check("warm-up", "x")
    known: list[float] = []
    unknown: list[float] = []
    for _ in range(9):  # interleaved, so load on the machine hits both alike
        known.append(timed("alice"))
        unknown.append(timed("nobody-by-this-name"))
    ratio = statistics.median(unknown) / statistics.median(known)
    assert 0.5 < ratio < 2.0, (known, unknown)
    # And it is real work, not a shortcut: tens of milliseconds, like the wrong password.
    assert statistics.median(unknown) > 0.3 * statistics.median(known)


# -- sign-out is final ------------------------------------------------------------------------


def _cookie(client: httpx.Client) -> str:
    value: str = client.cookies["gate_session"]
    return value


def _replayed(gate: Gate, cookie: str) -> httpx.Client:
    c = browser(gate)
    c.cookies.set("gate_session", cookie)
    return c


def test_a_cookie_replayed_after_sign_out_is_refused(web_gate_db: Gate) -> None:
    gate = web_gate_db
    request_id = gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000}, user_id="dave")[
        "request"
    ]["id"]
    with sign_in(gate, "alice") as c:
        page = c.get(f"/requests/{request_id}").text
        token = csrf_of(page)
        old = _cookie(c)
        r = c.post("/logout", data={"csrf_token": token})
        assert r.status_code == 303
    with _replayed(gate, old) as thief:
        assert thief.get("/").status_code == 303
        assert thief.get("/queue/rows").status_code == 401
        r = thief.post(
            f"/requests/{request_id}/decide", data={"verdict": "approve", "csrf_token": token}
        )
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
    with gate.client(cfg.ADMIN) as api:
        assert api.get(f"/v1/requests/{request_id}").json()["status"] == "pending"


def test_signing_in_again_ends_the_previous_sign_in(web_gate: Gate) -> None:
    with sign_in(web_gate, "alice") as c:
        first = _cookie(c)
        token = csrf_of(c.get("/").text)
        form = {"username": "alice", "password": PASSWORDS["alice"], "csrf_token": token}
        assert c.post("/login", data=form).status_code == 303
        assert _cookie(c) != first
        assert c.get("/").status_code == 200
    with _replayed(web_gate, first) as old:
        assert old.get("/").status_code == 303


def test_sign_out_holds_across_replicas_and_restarts(
    make_web_gate: WebGateFactory, db_url: str
) -> None:
    shared: dict[str, Any] = {"database_url": db_url, "session_secret": "s3cret-shared-by-both"}
    a = make_web_gate(**shared)
    b = make_web_gate(**shared)
    with sign_in(a, "alice") as on_a:
        kept = _cookie(on_a)
    with sign_in(a, "bob") as on_a:
        ended = _cookie(on_a)
        with _replayed(b, ended) as on_b:
            assert "Signed in as <strong>bob</strong>" in on_b.get("/").text
            on_a.post("/logout", data={"csrf_token": csrf_of(on_a.get("/").text)})
            assert on_b.get("/").status_code == 303  # the other replica refuses it too
    a.server.stop()
    b.server.stop()
    restarted = make_web_gate(**shared)
    with _replayed(restarted, ended) as c:
        assert c.get("/").status_code == 303
    with _replayed(restarted, kept) as c:
        assert "Signed in as <strong>alice</strong>" in c.get("/").text


def test_an_event_stream_ends_with_its_sign_in(web_gate_db: Gate) -> None:
    # The stream checked the sign-in once, when it opened: a copied cookie's stream kept
    # reporting every request id as it was made, after sign-out (and past the sign-in's age).
    gate = web_gate_db
    lines: list[str] = []
    connected, ended = threading.Event(), threading.Event()
    with sign_in(gate, "alice") as c:
        thief = _replayed(gate, _cookie(c))

        def listen() -> None:
            with thief.stream("GET", "/events", timeout=30) as r:
                assert r.status_code == 200
                for line in r.iter_lines():
                    if line.startswith(": connected"):
                        connected.set()
                    lines.append(line)
            ended.set()

        threading.Thread(target=listen, daemon=True).start()
        assert connected.wait(10)
        assert c.post("/logout", data={"csrf_token": csrf_of(c.get("/").text)}).status_code == 303
    time.sleep(SIGN_IN_RECHECK_SECONDS)  # a stream re-reads its sign-in at most this often
    gate.submit(tool_name="pay_vendor", tool_args={"amount": 60000}, user_id="dave")
    assert ended.wait(10), "the stream outlived the sign-in"
    assert not any(line.startswith("data:") for line in lines)
    assert thief.get("/events").status_code == 401
    thief.close()
