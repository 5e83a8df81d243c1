"""Beyond yes/no through the real `gate hook` process and a real `gate serve`: edits reach the
agent as `updatedInput`, approvals are bound to the call, grants allow at once, preset reject
reasons reach the model, post-tool records the outcome, session-end withdraws the session."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest

from gate.binding import call_hash
from tests.hooks.conftest import HOOK_RULES, HookProcess, Live, fixture, run_hook
from tests.support import config as cfg
from tests.support.servers import ServerProcess, free_port, wait_until

#: in front of the hook rules: Bash `deploy ...` calls offer grants and preset reasons
BEYOND_RULES: list[dict[str, Any]] = [
    {
        "name": "deploys",
        "tools": ["Bash"],
        "when": "args.command.startsWith('deploy')",
        "approvers": ["group:finance"],
        "timeout": "10m",
        "grant_scopes": ["session", "call"],
        "max_grant": "1h",
        "reject_reasons": ["wrong environment", "too risky"],
    },
    {
        "name": "strict-bash",
        "tools": ["Bash"],
        "when": "args.command.startsWith('sudo')",
        "allow_edits": False,
        "timeout": "10m",
    },
]


@pytest.fixture(scope="module")
def beyond(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """`gate serve` with BEYOND_RULES, the hook rules and the standard ones."""
    tmp = tmp_path_factory.mktemp("beyond")
    db = tmp / "gate.db"
    data = cfg.settings_data(f"sqlite:///{db}")
    data["rules"] = BEYOND_RULES + HOOK_RULES + data["rules"]
    path = tmp / "gate.toml"
    path.write_text(cfg.to_toml(data))
    live = Live(ServerProcess(path).start(), db)
    try:
        yield live
    finally:
        live.server.stop()


def bash(command: str, **changes: Any) -> dict[str, Any]:
    """A real Claude Code Bash payload with its own session and tool_use_id."""
    changes.setdefault("session_id", str(uuid.uuid4()))
    changes.setdefault("tool_use_id", f"toolu_{uuid.uuid4().hex[:24]}")
    return fixture("bash", tool_input={"command": command}, **changes)


def post_tool(pre: dict[str, Any], response: Any, **changes: Any) -> dict[str, Any]:
    """The PostToolUse input Claude Code sends after the call `pre` asked about."""
    payload = {
        **{k: v for k, v in pre.items() if k != "hook_event_name"},
        "hook_event_name": "PostToolUse",
        "tool_response": response,
    }
    payload.update(changes)
    return payload


def session_end(session_id: str, reason: str = "prompt_input_exit") -> dict[str, Any]:
    return {
        "session_id": session_id,
        "transcript_path": f"/home/u/.claude/projects/p/{session_id}.jsonl",
        "cwd": "/home/u/proj",
        "hook_event_name": "SessionEnd",
        "reason": reason,
    }


def decide(live: Live, request_id: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    with live.api(token) as c:
        r = c.post(f"/v1/requests/{request_id}/decision", json=body)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


def get(live: Live, path: str) -> Any:
    with live.api() as c:
        r = c.get(path)
    assert r.status_code == 200, r.text
    return r.json()


def deliveries(live: Live, request_id: str) -> list[tuple[str, str]]:
    """(kind, status) of the card deliveries of a request, read from the database file."""
    with closing(sqlite3.connect(live.db)) as conn:
        rows = conn.execute(
            "SELECT kind, status FROM delivery WHERE request_id = ? ORDER BY id", (request_id,)
        ).fetchall()
    return [(str(k), str(s)) for k, s in rows]


# -- approve with edits ---------------------------------------------------------------------


def test_edits_reach_claude_code_as_the_full_updated_input(beyond: Live) -> None:
    payload = bash("deploy prod")
    hook = beyond.hook().send(payload)
    request = beyond.wait_pending("Bash", payload["session_id"])
    edited = {**payload["tool_input"], "command": "deploy staging"}
    approved = decide(
        beyond,
        request["id"],
        cfg.ALICE,
        {"verdict": "approve", "edited_args": edited, "comment": "staging first"},
    )

    code, out, err = hook.json()

    assert (code, err) == (0, "")
    reason = (
        "gate: Approved with edits by alice in the API: staging first Changed: command "
        '"deploy prod" -> "deploy staging". The Bash call runs with the arguments as the '
        "approver edited them, not as they were sent."
    )
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": reason,  # shown to the user
            "updatedInput": edited,
            "additionalContext": reason,  # and told to the model
        }
    }
    # (a) the normal path: the verdict is bound to what runs, under the tool_use_id
    assert approved["args_hash"] == call_hash("Bash", edited, payload["tool_use_id"])


def test_edits_reach_a_permission_request_hook(beyond: Live) -> None:
    payload = {**bash("deploy prod"), "hook_event_name": "PermissionRequest"}
    del payload["tool_use_id"]
    hook = beyond.hook("--event", "permission-request").send(payload)
    request = beyond.wait_pending("Bash", payload["session_id"])
    edited = {"command": "deploy staging"}
    decide(beyond, request["id"], cfg.BOB, {"verdict": "approve", "edited_args": edited})

    code, out, _ = hook.json()

    assert code == 0
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow", "updatedInput": edited},
        }
    }


def test_edits_reach_the_command_dialect_in_its_stdout(beyond: Live) -> None:
    session = str(uuid.uuid4())
    payload = {
        "event": "tool.pre",
        "toolName": "pay_vendor",
        "toolInput": {"amount": 90000, "vendor": "acme"},
        "toolCallId": f"call_{uuid.uuid4().hex[:12]}",
        "sessionId": session,
    }
    hook = beyond.hook("--format", "command").send(payload)
    request = beyond.wait_pending("pay_vendor", session)
    edited = {"amount": 60000, "vendor": "acme"}
    decide(beyond, request["id"], cfg.ALICE, {"verdict": "approve", "edited_args": edited})

    code, out, err = hook.json()

    assert (code, err) == (0, "")
    assert out == {
        "continue": True,
        "reason": "gate: Approved with edits by alice in the API Changed: amount 90000 -> 60000. "
        "The pay_vendor call runs with the arguments as the approver edited them, not as they "
        "were sent.",
        "updatedInput": edited,
    }


def test_approved_as_asked_has_no_updated_input(beyond: Live) -> None:
    payload = bash("deploy prod")
    hook = beyond.hook().send(payload)
    request = beyond.wait_pending("Bash", payload["session_id"])
    decide(beyond, request["id"], cfg.ALICE, {"verdict": "approve"})

    _, out, _ = hook.json()

    assert "updatedInput" not in out["hookSpecificOutput"]
    assert out["hookSpecificOutput"]["permissionDecision"] == "allow"


# -- approval bound to the call -------------------------------------------------------------


def test_a_reused_call_id_with_other_arguments_is_denied(beyond: Live) -> None:
    first = bash("deploy prod")
    hook = beyond.hook().send(first)
    request = beyond.wait_pending("Bash", first["session_id"])
    decide(beyond, request["id"], cfg.ALICE, {"verdict": "approve"})
    assert hook.json()[1]["hookSpecificOutput"]["permissionDecision"] == "allow"

    # (b) the same tool_use_id, other arguments: the server refuses to carry the approval over
    replay = {**first, "tool_input": {**first["tool_input"], "command": "deploy prod --force"}}
    with beyond.api(cfg.AGENT) as c:
        r = c.post(
            "/v1/gate",
            json={
                "tool_name": "Bash",
                "tool_args": replay["tool_input"],
                "idempotency_key": first["tool_use_id"],
            },
        )
    assert r.status_code == 409 and r.json()["error"]["code"] == "idempotency_key_reused"

    code, out, _ = run_hook(beyond.url, replay)

    assert code == 0
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": (
                f"gate: The call id {first['tool_use_id']!r} was already used for a different "
                "call (another tool or other arguments), and an approval never carries over to "
                "other arguments, so this Bash call was blocked. Nobody reviewed it. Make the "
                "call again with a fresh call id, or tell the user."
            ),
        }
    }


def test_rules_can_forbid_edits_so_the_agent_runs_what_it_asked(beyond: Live) -> None:
    payload = bash("sudo reboot")
    hook = beyond.hook().send(payload)
    request = beyond.wait_pending("Bash", payload["session_id"])
    with beyond.api(cfg.ALICE) as c:
        r = c.post(
            f"/v1/requests/{request['id']}/decision",
            json={"verdict": "approve", "edited_args": {"command": "sudo true"}},
        )
    assert r.status_code == 422 and r.json()["error"]["code"] == "edits_not_allowed"
    decide(beyond, request["id"], cfg.ALICE, {"verdict": "approve"})

    _, out, _ = hook.json()

    assert out["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert "updatedInput" not in out["hookSpecificOutput"]


# -- grants ---------------------------------------------------------------------------------


def test_a_session_grant_allows_the_next_call_at_once(beyond: Live) -> None:
    session = str(uuid.uuid4())
    first = bash("deploy api", session_id=session)
    hook = beyond.hook().send(first)
    request = beyond.wait_pending("Bash", session)
    decide(
        beyond,
        request["id"],
        cfg.ALICE,
        {"verdict": "approve", "grant": {"scope": "session", "duration": "30m"}},
    )
    assert hook.json()[1]["hookSpecificOutput"]["permissionDecision"] == "allow"

    code, out, err = run_hook(beyond.url, bash("deploy web", session_id=session))

    assert (code, err) == (0, "")
    output = out["hookSpecificOutput"]
    assert output["permissionDecision"] == "allow"
    reason = output["permissionDecisionReason"]
    assert reason.startswith("gate: Allowed by a grant from alice (scope: session, until ")
    assert reason.endswith(f"made when approving request {request['id']}.")
    assert beyond.pending("Bash", session) is None  # nobody was asked

    other_session = beyond.hook().send(bash("deploy web"))
    pending = wait_until(lambda: beyond.pending("Bash", None), 20)
    assert pending["session_id"] != session
    with beyond.api(cfg.AGENT) as c:
        c.post(f"/v1/requests/{pending['id']}/cancel", json={"reason": "test over"})
    assert other_session.json()[1]["hookSpecificOutput"]["permissionDecision"] == "deny"


# -- preset reject reasons ------------------------------------------------------------------


def test_preset_reject_reasons_reach_the_model(beyond: Live) -> None:
    payload = bash("deploy prod")
    hook = beyond.hook().send(payload)
    request = beyond.wait_pending("Bash", payload["session_id"])
    assert request["options"]["reject_reasons"] == ["wrong environment", "too risky"]
    decide(
        beyond,
        request["id"],
        cfg.BOB,
        {"verdict": "reject", "reasons": ["wrong environment"], "comment": "use staging"},
    )

    _, out, _ = hook.json()

    assert out["hookSpecificOutput"] == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": (
            "gate: Rejected by bob in the API: wrong environment - use staging. A person "
            "reviewed this Bash call and said no, so it was not run. Do not retry it unchanged: "
            "take the comment into account, change the approach or ask the user."
        ),
    }


# -- outcome audit --------------------------------------------------------------------------


def test_post_tool_records_that_the_approved_call_ran(beyond: Live) -> None:
    payload = bash("deploy prod")
    hook = beyond.hook().send(payload)
    request = beyond.wait_pending("Bash", payload["session_id"])
    decide(beyond, request["id"], cfg.ALICE, {"verdict": "approve"})
    assert hook.json()[0] == 0
    response = {"stdout": "deployed v42\n", "stderr": "", "interrupted": False, "isImage": False}

    result = beyond.hook("--event", "post-tool").send(post_tool(payload, response)).result()

    assert result == (0, "", "")
    assert get(beyond, f"/v1/requests/{request['id']}")["outcome"] == "ran"
    trail = get(beyond, f"/v1/requests/{request['id']}/audit")
    assert [e["kind"] for e in trail] == ["created", "approved", "ran"]
    assert trail[-1]["detail"] == {"summary": "deployed v42"}
    assert trail[-1]["actor"] == "billing-agent"
    # Claude Code fires PostToolUse once per call; a second report changes nothing.
    again = beyond.hook("--event", "post-tool").send(post_tool(payload, response)).result()
    assert again == (0, "", "")
    assert len(get(beyond, f"/v1/requests/{request['id']}/audit")) == 3


def test_post_tool_is_found_from_hook_event_name_and_records_failures(beyond: Live) -> None:
    payload = bash("deploy prod")
    hook = beyond.hook().send(payload)
    request = beyond.wait_pending("Bash", payload["session_id"])
    edited = {"command": "deploy staging"}
    decide(beyond, request["id"], cfg.ALICE, {"verdict": "approve", "edited_args": edited})
    assert hook.json()[1]["hookSpecificOutput"]["updatedInput"] == edited
    failure = {
        **post_tool(payload, None, tool_input=edited),
        "hook_event_name": "PostToolUseFailure",
        "error": "Exit code 1: no such environment",
    }
    del failure["tool_response"]

    result = beyond.hook().send(failure).result()  # no --event: read from the input

    assert result == (0, "", "")
    trail = get(beyond, f"/v1/requests/{request['id']}/audit")
    assert [e["kind"] for e in trail][-1] == "failed"
    assert trail[-1]["detail"] == {"summary": "Exit code 1: no such environment"}


def test_post_tool_notes_a_call_that_ran_with_other_arguments(beyond: Live) -> None:
    payload = bash("deploy prod")
    hook = beyond.hook().send(payload)
    request = beyond.wait_pending("Bash", payload["session_id"])
    decide(beyond, request["id"], cfg.ALICE, {"verdict": "approve"})
    assert hook.json()[0] == 0
    changed = post_tool(payload, {"is_error": True, "content": "boom"}, tool_input={"command": "x"})

    assert beyond.hook("--event", "post-tool").send(changed).result() == (0, "", "")

    trail = get(beyond, f"/v1/requests/{request['id']}/audit")
    assert trail[-1]["kind"] == "failed"
    assert trail[-1]["detail"]["summary"] == (
        'ran with arguments other than the approved ones: {"is_error": true, "content": "boom"}'
    )


def test_post_tool_of_an_ungated_call_is_a_silent_no_op(beyond: Live) -> None:
    ungated = post_tool(bash("ls -la"), {"stdout": "a b c", "stderr": ""})
    allowed = post_tool(
        fixture("mcp", tool_use_id=f"toolu_{uuid.uuid4().hex[:24]}"), [{"type": "text"}]
    )

    for payload in (ungated, allowed):
        assert beyond.hook("--event", "post-tool").send(payload).result() == (0, "", "")
    assert beyond.hook("--event", "post-tool").send({"tool_name": "x"}).result() == (0, "", "")


def test_post_tool_never_blocks_even_when_gate_is_down(beyond: Live) -> None:
    payload = post_tool(bash("deploy prod"), {"stdout": ""})
    hook = HookProcess.start(f"http://127.0.0.1:{free_port()}", cfg.AGENT, ["--event", "post-tool"])
    code, out, err = hook.send(payload).result()

    assert (code, out) == (0, "")
    assert err.startswith("gate hook --event post-tool: could not look up the request")


# -- cancel on session end ------------------------------------------------------------------


def test_session_end_withdraws_the_session_and_the_waiting_hook_is_told(beyond: Live) -> None:
    session = str(uuid.uuid4())
    waiting = beyond.hook().send(bash("deploy api", session_id=session))
    first = beyond.wait_pending("Bash", session)
    second_payload = bash("deploy web", session_id=session)
    with beyond.api(cfg.AGENT) as c:
        second = c.post(
            "/v1/gate",
            json={
                "tool_name": "Bash",
                "tool_args": second_payload["tool_input"],
                "session_id": session,
                "idempotency_key": second_payload["tool_use_id"],
            },
        ).json()["request"]
    elsewhere = beyond.hook().send(bash("deploy other"))

    result = beyond.hook("--event", "session-end").send(session_end(session)).result()

    assert result == (0, "", "")
    code, out, _ = waiting.json()
    assert code == 0
    assert out["hookSpecificOutput"] == {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": (
            "gate: The approval request for this Bash call was withdrawn before anyone decided "
            "(Cancelled by billing-agent: the Claude Code session ended (prompt_input_exit)). "
            "The call was not run; no human rejected it."
        ),
    }
    for request_id in (first["id"], second["id"]):
        assert get(beyond, f"/v1/requests/{request_id}")["status"] == "cancelled"
        # the outbox updates the request's cards (here the log channel's)
        wait_until(lambda rid=request_id: ("update", "sent") in deliveries(beyond, rid), 20)
    other = wait_until(lambda: beyond.pending("Bash", None), 20)
    assert other["session_id"] != session
    with beyond.api(cfg.AGENT) as c:
        c.post(f"/v1/requests/{other['id']}/cancel", json={"reason": "test over"})
    assert elsewhere.json()[0] == 0


def test_session_end_also_reads_the_event_from_its_input(beyond: Live) -> None:
    session = str(uuid.uuid4())
    waiting = beyond.hook().send(bash("deploy api", session_id=session))
    beyond.wait_pending("Bash", session)

    assert beyond.hook().send(session_end(session, "clear")).result() == (0, "", "")

    reason = waiting.json()[1]["hookSpecificOutput"]["permissionDecisionReason"]
    assert "(Cancelled by billing-agent: the Claude Code session ended (clear))" in reason
