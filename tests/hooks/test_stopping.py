"""A request never outlives the agent that asked: a stopped `gate hook` (real process, real
gate) withdraws it, the hook's deadline is the request's, and so is the SDK's."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gate.base.statuses import utcnow
from gate.client import GateClient
from gate.config.settings import Settings
from tests.conftest import Gate, GateFactory
from tests.hooks.conftest import Live, hook_settings, run_hook, serve_in_thread
from tests.hooks.test_claude_code import RM, fresh, pre_tool_use
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite


def lifetime(request: dict[str, Any]) -> timedelta:
    """How long a request was given: expires_at - created_at."""
    return datetime.fromisoformat(request["expires_at"]) - datetime.fromisoformat(
        request["created_at"]
    )


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name
)
def test_a_stopped_hook_withdraws_its_request(live: Live, sig: signal.Signals) -> None:
    payload = fresh("bash", tool_input=RM)
    hook = live.hook("--timeout", "300").send(payload)
    request = live.wait_pending("Bash", payload["session_id"])  # long-polling now

    hook.proc.send_signal(sig)
    code, out, _ = hook.json(timeout=30)

    with live.api() as c:
        withdrawn = c.get(f"/v1/requests/{request['id']}").json()
    assert withdrawn["status"] == "cancelled"
    assert withdrawn["reason"] == (
        f"Cancelled by billing-agent: the agent's hook was stopped ({sig.name}) before anyone "
        "decided"
    )
    assert code == 0
    assert out == pre_tool_use(
        "deny",
        f"gate: The hook was stopped ({sig.name}) while this Bash call waited for approval, so "
        f"approval request {request['id']} was withdrawn and gate did not let the call through. "
        "No human rejected it.",
    )
    # Claude Code runs the call through its own permissions now: nobody can approve it later.
    with live.api(cfg.ALICE) as c:
        late = c.post(f"/v1/requests/{request['id']}/decision", json={"verdict": "approve"})
    assert late.status_code == 409
    assert late.json()["error"]["code"] == "already_decided"


def test_approvers_see_the_hooks_deadline_not_the_rules(live: Live) -> None:
    payload = fresh("bash", tool_input=RM)  # rule risky-bash: 10 minutes
    hook = live.hook("--timeout", "120").send(payload)
    request = live.wait_pending("Bash", payload["session_id"])
    hook.proc.send_signal(signal.SIGTERM)
    hook.json(timeout=30)

    assert timedelta(seconds=117) <= lifetime(request) <= timedelta(seconds=118)


@pytest.fixture
def slow_sweep(tmp_path: Path) -> Iterator[Live]:
    """A gate whose expiry sweep runs once a minute: the hook's deadline comes first."""
    data = hook_settings(migrated_sqlite(tmp_path / "gate.db"))
    data["server"]["sweep_interval_seconds"] = 60
    with serve_in_thread(tmp_path, data) as live:
        yield live


def test_a_hook_withdraws_at_its_deadline_when_the_server_has_not_expired_it(
    slow_sweep: Live,
) -> None:
    payload = fresh("bash", tool_input=RM)

    code, out, _ = run_hook(slow_sweep.url, payload, "--timeout", "2")

    with slow_sweep.api() as c:
        (request,) = c.get("/v1/requests", params={"session_id": payload["session_id"]}).json()[
            "items"
        ]
    assert code == 0
    assert out == pre_tool_use(
        "deny",
        f"gate: Nobody decided this Bash call within the hook's 2 s limit, so it was not run and "
        f"approval request {request['id']} was withdrawn. No human rejected it: ask the user "
        "whether to try again.",
    )
    assert request["status"] == "cancelled"
    assert request["reason"] == (
        "Cancelled by billing-agent: the agent's hook stopped waiting after 2 s"
    )


# -- the server side of expires_in ------------------------------------------------------------


@pytest.fixture
def deadline_gate(make_gate: GateFactory, db_url: str) -> Gate:
    data = cfg.settings_data(db_url)
    data["rules"].append(
        {"name": "quiet-yes", "tools": ["merge_*"], "timeout": "10m", "on_timeout": "approve"}
    )
    return make_gate(settings=Settings(**data))


def test_expires_in_shortens_the_wait_never_lengthens_it(deadline_gate: Gate) -> None:
    short = deadline_gate.submit(tool_name="ask_a", expires_in=30)["request"]
    long = deadline_gate.submit(tool_name="ask_b", expires_in=3600)["request"]
    none = deadline_gate.submit(tool_name="ask_c")["request"]

    assert lifetime(short) == timedelta(seconds=30)
    assert lifetime(long) == lifetime(none) == timedelta(minutes=10)


def test_expires_in_cannot_hurry_an_approval_on_timeout(deadline_gate: Gate) -> None:
    # A hostile agent must not turn "approve if nobody objects within 10m" into "approve now".
    request = deadline_gate.submit(tool_name="merge_pr", expires_in=0.001)["request"]

    assert lifetime(request) == timedelta(minutes=10)
    swept = deadline_gate.state.service.expire_due(utcnow() + timedelta(minutes=9))
    with deadline_gate.client(cfg.ADMIN) as c:
        assert c.get(f"/v1/requests/{request['id']}").json()["status"] == "pending"
    assert swept == 0


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (0, "greater than 0"),
        (-5, "greater than 0"),
        (30 * 24 * 3600 + 1, "less than or equal to 2592000"),
        ("soon", "valid number"),
        ([1], "valid number"),
    ],
)
def test_a_bad_expires_in_is_a_precise_422(gate_sqlite: Gate, value: Any, says: str) -> None:
    with gate_sqlite.client(cfg.AGENT) as c:
        r = c.post("/v1/gate", json={"tool_name": "ask_x", "expires_in": value})

    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "invalid_input"
    assert "expires_in" in error["message"] and says in error["message"]


# -- the SDK ----------------------------------------------------------------------------------


async def test_a_cancelled_sdk_wait_withdraws_its_request(gate_sqlite: Gate) -> None:
    client = GateClient(gate_sqlite.url, cfg.AGENT, timeout=120)

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.5):  # cancels the waiting task: it must withdraw first
            await client.check_async("ask_sdk", {"n": 1}, session_id="sdk-cancel")
    await client.aclose()

    with gate_sqlite.client(cfg.ADMIN) as c:
        (request,) = c.get("/v1/requests", params={"session_id": "sdk-cancel"}).json()["items"]
    assert request["status"] == "cancelled"
    assert request["reason"].endswith(
        "the agent's hook was stopped (the waiting task was cancelled) before anyone decided"
    )
    assert timedelta(seconds=117) <= lifetime(request) <= timedelta(seconds=118)
