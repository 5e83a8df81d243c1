"""`gate hook --format command` end to end: exit 0 allows, exit 2 blocks with the reason on
stderr, and stdout carries `{"continue": bool, "reason": ...}`."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from typing import Any

import pytest

from tests.hooks.conftest import Live, LiveProcess, run_hook
from tests.support import config as cfg
from tests.support.servers import free_port


def shapes(tool: str, args: dict[str, Any], session: str) -> list[dict[str, Any]]:
    """The same call in each input shape command-hook runtimes use."""
    call_id = f"call_{uuid.uuid4().hex[:12]}"
    return [
        {"event": "tool.pre", "tool_name": tool, "tool_input": args, "session_id": session},
        {"event": "tool.pre", "toolName": tool, "toolInput": args, "sessionId": session},
        {
            "event": "tool.pre",
            "session_id": session,
            "tool_call": {"id": call_id, "name": tool, "arguments": json.dumps(args)},
        },
    ]


@pytest.mark.parametrize("shape", [0, 1, 2], ids=["snake", "camel", "tool_call"])
def test_approve_and_reject(live: Live, shape: int) -> None:
    session = str(uuid.uuid4())
    payload = shapes("pay_vendor", {"amount": 90000, "vendor": "acme"}, session)[shape]

    hook = live.hook("--format", "command").send(payload)
    request = live.wait_pending("pay_vendor", session)
    assert request["tool_args"] == {"amount": 90000, "vendor": "acme"}
    live.decide(request["id"], cfg.ALICE, "approve", "invoice checked")
    assert hook.result() == (
        0,
        json.dumps(
            {"continue": True, "reason": "gate: Approved by alice in the API: invoice checked."}
        )
        + "\n",
        "",
    )

    payload = shapes("pay_vendor", {"amount": 95000}, session)[shape]
    hook = live.hook("--format", "command").send(payload)
    request = live.wait_pending("pay_vendor", session)
    live.decide(request["id"], cfg.BOB, "reject", "over budget")
    code, out, err = hook.result()
    reason = (
        "gate: Rejected by bob in the API: over budget. A person reviewed this pay_vendor call "
        "and said no, so it was not run. Do not retry it unchanged: take the comment into "
        "account, change the approach or ask the user."
    )
    assert code == 2
    assert json.loads(out) == {"continue": False, "reason": reason}
    assert err == reason + "\n"


def test_expiry_cancel_and_deadline_block(live: Live) -> None:
    session = str(uuid.uuid4())
    code, out, err = run_hook(
        live.url, shapes("ephemeral_job", {}, session)[0], "--format", "command"
    )
    assert code == 2
    assert out["continue"] is False
    assert err.startswith("gate: Nobody answered within 1s (rule 'short-fuse')")

    hook = live.hook("--format", "command").send(shapes("ask_thing", {"n": 1}, session)[0])
    request = live.wait_pending("ask_thing", session)
    with live.api(cfg.AGENT) as c:
        assert c.post(f"/v1/requests/{request['id']}/cancel").status_code == 200
    code, out, err = hook.json()
    assert code == 2
    assert "was withdrawn before anyone decided (Cancelled by billing-agent)" in err

    code, out, err = run_hook(
        live.url, shapes("ask_thing", {"n": 2}, session)[0], "--format", "command", "--timeout", "1"
    )
    assert code == 2
    # The request carried the hook's deadline, so the server expired it first.
    assert err.startswith("gate: Nobody answered within 1s (rule 'anyone')")


def test_policy_allow_deny_and_no_rule(live: Live) -> None:
    session = str(uuid.uuid4())
    allow = run_hook(live.url, shapes("read_file", {}, session)[1], "--format", "command")
    deny = run_hook(
        live.url, shapes("db_write", {"env": "prod"}, session)[1], "--format", "command"
    )
    none = run_hook(live.url, shapes("unlisted", {}, session)[1], "--format", "command")
    none_denied = run_hook(
        live.url, shapes("unlisted", {}, session)[1], "--format", "command", "--on-no-rule", "deny"
    )

    assert allow == (0, {"continue": True, "reason": "gate: Allowed by rule 'reads'."}, "")
    assert deny[0] == 2
    assert deny[1]["continue"] is False
    assert deny[2].startswith("gate: Blocked by rule 'deny-prod-writes': No writes to prod from")
    assert none == (0, {"continue": True, "reason": "gate: No rule covers this unlisted call."}, "")
    assert none_denied[0] == 2


def test_gate_down_before_and_during_the_wait_blocks(own_live: LiveProcess) -> None:
    session = str(uuid.uuid4())
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = run_hook(url, shapes("ask_x", {}, session)[0], "--format", "command")
    assert code == 2
    assert out["continue"] is False
    assert err.startswith(f"gate: The approval server at {url} could not be reached")

    hook = own_live.hook("--format", "command", "--timeout", "3")
    hook.send(shapes("ask_x", {}, session)[0])
    own_live.wait_pending("ask_x", session)
    own_live.server.kill()
    code, out, err = hook.json()
    assert code == 2
    assert err.startswith(f"gate: Lost contact with the approval server at {own_live.url}")


def test_restart_during_the_wait_still_delivers(own_live: LiveProcess) -> None:
    session = str(uuid.uuid4())
    hook = own_live.hook("--format", "command", "--timeout", "60")
    hook.send(shapes("ask_y", {"v": 1}, session)[2])
    request = own_live.wait_pending("ask_y", session)
    own_live.server.kill()
    own_live.server.start()
    own_live.decide(request["id"], cfg.CAROL, "approve")

    assert hook.json() == (
        0,
        {"continue": True, "reason": "gate: Approved by carol in the API."},
        "",
    )


def test_fail_open_allows_when_the_gate_is_down() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    code, out, err = run_hook(url, {"tool_name": "ask_z"}, "--format", "command", "--fail-open")

    assert code == 0
    assert out["continue"] is True
    assert "WARNING" in err and "WITHOUT approval" in err


def test_bad_arguments_json_blocks(live: Live) -> None:
    payload = {"tool_call": {"name": "ask_q", "arguments": "{oops"}}

    code, out, err = run_hook(live.url, payload, "--format", "command")

    assert code == 2
    assert "tool_call.arguments is not valid JSON" in err


def test_the_hook_imports_only_the_standard_library() -> None:
    heavy = ["fastapi", "sqlmodel", "pydantic", "httpx", "sqlalchemy", "starlette", "uvicorn"]
    script = (
        "import sys, json; import gate.cli, gate.hook.command; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out))
    assert loaded.isdisjoint(heavy), loaded & set(heavy)
    stdlib = set(sys.stdlib_module_names) | {"gate", "_distutils_hack", "__main__"}
    assert loaded <= stdlib, loaded - stdlib
