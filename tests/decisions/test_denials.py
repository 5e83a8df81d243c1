"""Denials as a signal over HTTP: a tripped agent's allowed call is asked with the reason on
the request, `gate agents list|reset` and `/v1/agents` reset it (audited), and two replicas
on one PostgreSQL database agree on who is tripped."""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gate.cli import main
from gate.config.settings import Settings
from gate.decisions import denials
from tests.conftest import Gate, GateFactory
from tests.support import config as cfg
from tests.support.servers import wait_until


def _settings(database_url: str, in_a_row: int = 2) -> Settings:
    data = copy.deepcopy(cfg.settings_data(database_url))
    data["denials"] = {"in_a_row": in_a_row}
    return Settings(**data)


def _ask(gate: Gate, n: int, agent_id: str = "bot") -> str:
    answer = gate.submit(tool_name="ask_thing", tool_args={"n": n}, agent_id=agent_id)
    assert answer["decision"] == "ask", answer
    request_id: str = answer["request"]["id"]
    return request_id


def _reject(gate: Gate, request_id: str, token: str = cfg.ALICE) -> None:
    r = gate.decide(request_id, token, "reject", "wrong account")
    assert r.status_code == 200, r.text


def _read(gate: Gate, agent_id: str = "bot") -> dict[str, Any]:
    return gate.submit(tool_name="read_file", tool_args={"path": "a"}, agent_id=agent_id)


def test_a_tripped_agent_is_asked_until_reset_from_the_cli(
    make_gate: GateFactory, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = make_gate(settings=_settings(db_url))
    first, second = _ask(gate, 1), _ask(gate, 2)
    _reject(gate, first)
    assert _read(gate)["decision"] == "allow"
    _reject(gate, second)
    asked = _read(gate)
    assert (asked["decision"], asked["rule"]) == ("ask", denials.TRIPPED_RULE)
    words = "agent 'bot' tripped: 2 rejections in a row; asked until a person resets it"
    assert asked["reason"] == words and asked["request"]["reason"] == words
    assert asked["request"]["options"]["tripped"] == words
    with gate.client(cfg.AGENT) as c:  # an agent may not list or reset itself
        assert c.post("/v1/agents/reset", json={"agent": "bot"}).status_code == 403
    with gate.client(cfg.ADMIN) as c:  # what no database can store is a clear 422
        for bad in ({"agent": "b\x00t"}, {"agent": ""}, {"name": "bot"}):
            refused = c.post("/v1/agents/reset", json=bad)
            assert refused.status_code == 422 and "error" in refused.json(), refused.text
    server = ["--url", gate.url, "--token", cfg.ADMIN]
    assert main(["agents", *server, "list"]) == 0
    listed = capsys.readouterr().out
    assert "bot" in listed and "2 rejections in a row" in listed
    assert main(["agents", *server, "reset", "bot"]) == 0
    assert "reset agent bot" in capsys.readouterr().out
    assert _read(gate)["decision"] == "allow"
    with pytest.raises(SystemExit, match="404 agent_not_tripped"):
        main(["agents", *server, "reset", "bot"])
    with gate.client(cfg.ADMIN) as c:
        trail = c.get(f"/v1/requests/{second}/audit").json()
    kinds = [(e["kind"], e["actor"]) for e in trail]
    assert (denials.TRIPPED_EVENT, None) in kinds and (denials.RESET_EVENT, "ops-admin") in kinds
    assert main(["audit", "verify", "--config", _config(gate, db_url)]) == 0


def _config(gate: Gate, db_url: str) -> str:
    """A gate.toml for `gate audit verify` on the same database."""
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp())
    return str(cfg.write_config(folder / "gate.toml", db_url))


@pytest.mark.postgres
def test_two_replicas_agree_on_trips_and_resets(make_gate: GateFactory, postgres_url: str) -> None:
    a = make_gate(settings=_settings(postgres_url))
    b = make_gate(settings=_settings(postgres_url))
    for replica in (a, b):
        wait_until(lambda r=replica: getattr(r.state.notifier, "backend_pid", None))
    # two rejections decided at the same moment on two replicas: neither may count the
    # other one short (the count is serialised per agent)
    for attempt in range(3):
        agent = f"racer-{attempt}"
        ids = [_ask(a, n, agent) for n in range(2)]
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(_reject, (a, b), ids))
        for replica in (a, b):
            wait_until(lambda r=replica, g=agent: _read(r, g)["decision"] == "ask", timeout=5)
    # a reset on one replica frees the agent on the other
    with b.client(cfg.ALICE) as c:
        assert c.post("/v1/agents/reset", json={"agent": "racer-0"}).status_code == 200
    wait_until(lambda: _read(a, "racer-0")["decision"] == "allow", timeout=5)
    with a.client(cfg.ALICE) as c:
        tripped = [t["agent"] for t in c.get("/v1/agents/tripped").json()]
    assert tripped == ["racer-1", "racer-2"]


def test_a_reset_from_the_console_page(make_gate: GateFactory, db_url: str) -> None:
    from tests.web.conftest import csrf_of, landed, sign_in, web_settings

    settings = web_settings(db_url)
    settings.denials.in_a_row = 1
    gate = make_gate(settings=settings)
    _reject(gate, _ask(gate, 1))
    asked = _read(gate)
    with sign_in(gate, "alice") as c:
        page = c.get("/agents").text
        assert 'data-agent="bot"' in page and "1 rejections in a row" in page
        assert '<span class="badge"' in page  # the nav counts tripped agents
        detail = c.get(f"/requests/{asked['request']['id']}").text
        assert "Agent tripped" in detail and "asked until a person resets it" in detail
        r = c.post("/agents/reset", data={"csrf_token": csrf_of(page), "agent": "bot"})
        done = landed(c, r, "/agents")
        assert "Reset agent &#39;bot&#39;" in done.text
        assert "No agent is tripped" in done.text and "by alice" in done.text
        again = c.post("/agents/reset", data={"csrf_token": csrf_of(page), "agent": "bot"})
        assert "is not tripped" in landed(c, again, "/agents").text
    assert _read(gate)["decision"] == "allow"
