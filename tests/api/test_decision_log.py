"""The decision log over HTTP: `GET /v1/decisions` (filters, paging, who may read), two
replicas writing one table, a clean stop writing the buffer, and a crash (kill -9 of a real
`gate serve`) losing at most one window and never an ask.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from gate.config.settings import Settings
from gate.store.db import normalise_url
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.http import TLS
from tests.support.servers import ServerProcess, wait_until

#: a short window, so the tests wait little for a batch
WINDOW = 0.2


def settings(db_url: str, **decision_log: Any) -> Settings:
    data = cfg.settings_data(db_url)
    data["decision_log"] = {"flush_seconds": WINDOW, **decision_log}
    return Settings(**data)


def listed(gate: Gate, token: str = cfg.ADMIN, **query: Any) -> dict[str, Any]:
    with gate.client(token) as client:
        r = client.get("/v1/decisions", params=query)
    assert r.status_code == 200, r.text
    page: dict[str, Any] = r.json()
    return page


def logged_count(db_url: str) -> int:
    engine = sa.create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM decision_log")).scalar_one())
    finally:
        engine.dispose()


def test_every_answer_is_listed_with_filters_and_pages(make_gate: GateFactory, db_url: str) -> None:
    gate = make_gate(settings(db_url))
    gate.submit(tool_name="read_file", tool_args={"path": "/a", "password": "hunter2"})
    gate.submit(tool_name="db_write", tool_args={"env": "prod"}, agent_id="bot-2")
    asked = gate.submit(tool_name="ask_ops", tool_args={}, session_id="s-1")
    gate.submit(tool_name="something_else", tool_args={})
    page = wait_until(lambda: (p := listed(gate)) and len(p["items"]) == 4 and p)
    answers = [(i["tool_name"], i["answer"], i["rule"]) for i in page["items"]]
    assert answers == [
        ("something_else", "allow", None),
        ("ask_ops", "ask", "anyone"),
        ("db_write", "deny", "deny-prod-writes"),
        ("read_file", "allow", "reads"),
    ]
    assert page["items"][1]["request_id"] == asked["request"]["id"]
    assert page["items"][3]["masked_args"] == {"path": "/a", "password": "[masked]"}
    revision = gate.state.policy.revision
    assert {i["policy_revision"] for i in page["items"]} == {revision}
    assert "facts" not in page["items"][0]  # the whole arguments are for replay only
    assert [i["answer"] for i in listed(gate, answer="deny")["items"]] == ["deny"]
    assert [i["agent_id"] for i in listed(gate, agent_id="bot-2")["items"]] == ["bot-2"]
    assert [i["rule"] for i in listed(gate, rule="anyone")["items"]] == ["anyone"]
    assert len(listed(gate, tool_name="read_file")["items"]) == 1
    first = listed(gate, limit=3)
    assert len(first["items"]) == 3 and first["next_cursor"] is not None
    rest = listed(gate, limit=3, cursor=first["next_cursor"])
    assert [i["tool_name"] for i in rest["items"]] == ["read_file"]
    assert rest["next_cursor"] is None
    assert listed(gate, since="2999-01-01T00:00:00")["items"] == []
    assert len(listed(gate, until="2999-01-01T00:00:00Z")["items"]) == 4
    assert len(listed(gate, token=cfg.ALICE)["items"]) == 4  # approvers read it too


def test_an_agent_may_not_read_the_log_and_bad_queries_are_422(make_gate: GateFactory) -> None:
    gate = make_gate()
    with gate.client(cfg.AGENT) as client:
        r = client.get("/v1/decisions")
    assert r.status_code == 403 and r.json()["error"]["code"] == "wrong_role"
    with gate.client(cfg.ADMIN) as client:
        for query in (
            {"answer": "maybe"},
            {"cursor": "x"},
            {"cursor": 2**63},
            {"limit": 0},
            {"since": "soon"},
        ):
            r = client.get("/v1/decisions", params=query)
            assert r.status_code == 422, (query, r.text)
            assert "error" in r.json()
        for edge in ("0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"):
            r = client.get("/v1/decisions", params={"since": edge, "until": edge})
            assert r.status_code == 200, r.text
    with httpx.Client(base_url=gate.url, verify=TLS) as client:
        assert client.get("/v1/decisions").status_code == 401


@pytest.mark.postgres
def test_two_replicas_write_one_table(make_gate: GateFactory, postgres_url: str) -> None:
    first = make_gate(settings(postgres_url))
    second = make_gate(settings(postgres_url))
    for n in range(5):
        first.submit(tool_name="read_file", tool_args={"n": n}, agent_id="one")
        second.submit(tool_name="read_file", tool_args={"n": n}, agent_id="two")
    second.submit(tool_name="ask_both", tool_args={})
    page = wait_until(lambda: (p := listed(first)) and len(p["items"]) == 11 and p)
    assert {i["agent_id"] for i in page["items"]} == {"one", "two", None}
    assert listed(second)["items"] == page["items"]


def test_a_clean_stop_writes_the_buffer(make_gate: GateFactory, sqlite_url: str) -> None:
    gate = make_gate(settings(sqlite_url, flush_seconds=10))  # no window passes
    for n in range(7):
        gate.submit(tool_name="read_file", tool_args={"n": n})
    assert logged_count(sqlite_url) == 0
    gate.server.stop()
    assert logged_count(sqlite_url) == 7


def test_a_crash_loses_at_most_one_window_and_never_an_ask(tmp_path: Path, db_url: str) -> None:
    window = 0.5
    data = cfg.settings_data(db_url)
    data["decision_log"] = {"flush_seconds": window}
    config = tmp_path / "gate.toml"
    config.write_text(cfg.to_toml(data))
    server = ServerProcess(config).start()
    answered: list[tuple[float, str]] = []
    asks: list[str] = []
    try:
        headers = {"Authorization": f"Bearer {cfg.AGENT}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=10) as client:
            started = time.monotonic()
            n = 0
            while time.monotonic() - started < 4 * window:  # several windows, then the kill
                n += 1
                tool = "ask_crash" if n % 10 == 0 else "read_file"
                r = client.post("/v1/gate", json={"tool_name": tool, "session_id": f"s-{n}"})
                assert r.status_code == 200, r.text
                answered.append((time.monotonic(), f"s-{n}"))
                if tool == "ask_crash":
                    asks.append(r.json()["request"]["id"])
            killed_at = time.monotonic()
            server.kill()  # SIGKILL: no lifespan, no last flush
    finally:
        server.stop()
    engine = sa.create_engine(normalise_url(db_url))
    try:
        with engine.connect() as conn:
            logged = set(conn.execute(sa.text("SELECT session_id FROM decision_log")).scalars())
            requests = set(conn.execute(sa.text("SELECT id FROM confirmation_request")).scalars())
    finally:
        engine.dispose()
    lost = [(at, session) for at, session in answered if session not in logged]

    # a window, plus the time the last batch took to write, before the kill
    assert all(at > killed_at - window - 0.25 for at, _ in lost), (len(lost), len(answered))
    assert len(lost) < len(answered)  # earlier windows were written
    assert set(asks) <= requests  # every ask answered is a request, whatever the log lost
    assert "policy revision" in server.log()  # said at start
