"""Sign-in limits hold across replicas and cannot be reset by the client.

The buckets are rows of the shared database, so two apps on one database give a guesser the
rate of one; and `gate serve` believes `X-Forwarded-For` only from `[server].trusted_proxies`
(none by default, loopback included), so a guesser on the same host cannot name a fresh
client address with each try.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gate.web.signin import CLIENT_BURST, NAME_BURST
from tests.conftest import Gate
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.http import TLS
from tests.support.servers import ServerProcess
from tests.web.conftest import PASSWORDS, WebGateFactory, browser, csrf_of, web_settings


def _attempt(c: httpx.Client, username: str, password: str, forwarded: str) -> int:
    token = csrf_of(c.get("/login").text)
    form = {"username": username, "password": password, "csrf_token": token}
    return c.post("/login", data=form, headers={"X-Forwarded-For": forwarded}).status_code


def test_a_name_is_limited_once_across_two_replicas(
    make_web_gate: WebGateFactory, db_url: str
) -> None:
    replicas = [make_web_gate(database_url=db_url) for _ in range(2)]
    clients = [browser(g) for g in replicas]
    try:
        # each replica alone would allow NAME_BURST tries at bob; together they allow that many
        for i in range(NAME_BURST):
            status = _attempt(clients[i % 2], "bob", "guess", f"192.0.2.{i + 1}")
            assert status == 401, (i, status)
        for c in clients:
            assert _attempt(c, "bob", PASSWORDS["bob"], "192.0.2.99") == 429
    finally:
        for c in clients:
            c.close()


def test_a_client_is_limited_once_across_two_replicas(
    make_web_gate: WebGateFactory, db_url: str
) -> None:
    replicas: list[Gate] = [make_web_gate(database_url=db_url) for _ in range(2)]
    clients = [browser(g) for g in replicas]
    try:
        for i in range(CLIENT_BURST):
            status = _attempt(clients[i % 2], f"user{i}", "guess", "203.0.113.7")
            assert status == 401, (i, status)
        for c in clients:
            assert _attempt(c, "alice", PASSWORDS["alice"], "203.0.113.7") == 429
    finally:
        for c in clients:
            c.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServerProcess]:
    """`gate serve` (a real process, its own uvicorn settings) with web sign-in."""
    settings = web_settings(migrated_sqlite(tmp_path / "gate.db"))
    data = copy.deepcopy(cfg.settings_data(settings.server.database_url))
    hashes = {a.name: a.password_hash for a in settings.approvers}
    for approver in data["approvers"]:
        secret = hashes[approver["name"]]
        approver["password_hash"] = secret.get_secret_value() if secret else None
    path = tmp_path / "gate.toml"
    path.write_text(cfg.to_toml(data))
    server = ServerProcess(path).start()
    yield server
    server.stop()


def test_a_new_forwarded_for_from_loopback_does_not_reset_the_client_limit(
    served: ServerProcess,
) -> None:
    with httpx.Client(base_url=served.url, follow_redirects=False, verify=TLS) as c:
        c.headers["Origin"] = served.url
        for i in range(CLIENT_BURST):  # a new name and a new "address" on every try
            assert _attempt(c, f"user{i}", "guess", f"10.1.{i}.{i + 1}") == 401, i
        assert _attempt(c, "alice", PASSWORDS["alice"], "10.200.0.1") == 429
