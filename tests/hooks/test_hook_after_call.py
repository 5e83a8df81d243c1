"""After the call, through the real `gate hook` process and a real gate: post-tool
records whether the approved call ran (and never blocks), session-end withdraws the session's
pending requests and the waiting hook is told."""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import closing
from typing import Any

from tests.hooks.conftest import HookProcess, Live, bash, fixture, post_decision
from tests.support import config as cfg
from tests.support.servers import free_port, wait_until


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


# -- outcome audit --------------------------------------------------------------------------


def test_post_tool_records_that_the_approved_call_ran(offering: Live) -> None:
    payload = bash("deploy prod")
    hook = offering.hook().send(payload)
    request = offering.wait_pending("Bash", payload["session_id"])
    post_decision(offering, request["id"], cfg.ALICE, {"verdict": "approve"})
    assert hook.json()[0] == 0
    response = {"stdout": "deployed v42\n", "stderr": "", "interrupted": False, "isImage": False}

    result = offering.hook("--event", "post-tool").send(post_tool(payload, response)).result()

    assert result == (0, "", "")
    assert get(offering, f"/v1/requests/{request['id']}")["outcome"] == "ran"
    trail = get(offering, f"/v1/requests/{request['id']}/audit")
    assert [e["kind"] for e in trail] == ["created", "approved", "ran"]
    assert trail[-1]["detail"] == {"summary": "deployed v42"}
    assert trail[-1]["actor"] == "billing-agent"
    # Claude Code fires PostToolUse once per call; a second report changes nothing.
    again = offering.hook("--event", "post-tool").send(post_tool(payload, response)).result()
    assert again == (0, "", "")
    assert len(get(offering, f"/v1/requests/{request['id']}/audit")) == 3


def test_post_tool_is_found_from_hook_event_name_and_records_failures(offering: Live) -> None:
    payload = bash("deploy prod")
    hook = offering.hook().send(payload)
    request = offering.wait_pending("Bash", payload["session_id"])
    edited = {"command": "deploy staging"}
    post_decision(offering, request["id"], cfg.ALICE, {"verdict": "approve", "edited_args": edited})
    assert hook.json()[1]["hookSpecificOutput"]["updatedInput"] == edited
    failure = {
        **post_tool(payload, None, tool_input=edited),
        "hook_event_name": "PostToolUseFailure",
        "error": "Exit code 1: no such environment",
    }
    del failure["tool_response"]

    result = offering.hook().send(failure).result()  # no --event: read from the input

    assert result == (0, "", "")
    trail = get(offering, f"/v1/requests/{request['id']}/audit")
    assert [e["kind"] for e in trail][-1] == "failed"
    assert trail[-1]["detail"] == {"summary": "Exit code 1: no such environment"}


def test_post_tool_notes_a_call_that_ran_with_other_arguments(offering: Live) -> None:
    payload = bash("deploy prod")
    hook = offering.hook().send(payload)
    request = offering.wait_pending("Bash", payload["session_id"])
    post_decision(offering, request["id"], cfg.ALICE, {"verdict": "approve"})
    assert hook.json()[0] == 0
    changed = post_tool(payload, {"is_error": True, "content": "boom"}, tool_input={"command": "x"})

    assert offering.hook("--event", "post-tool").send(changed).result() == (0, "", "")

    trail = get(offering, f"/v1/requests/{request['id']}/audit")
    assert trail[-1]["kind"] == "failed"
    assert trail[-1]["detail"]["summary"] == (
        'ran with arguments other than the approved ones: {"is_error": true, "content": "boom"}'
    )


def test_post_tool_of_an_ungated_call_is_a_silent_no_op(offering: Live) -> None:
    ungated = post_tool(bash("ls -la"), {"stdout": "a b c", "stderr": ""})
    allowed = post_tool(
        fixture("mcp", tool_use_id=f"toolu_{uuid.uuid4().hex[:24]}"), [{"type": "text"}]
    )

    for payload in (ungated, allowed):
        assert offering.hook("--event", "post-tool").send(payload).result() == (0, "", "")
    assert offering.hook("--event", "post-tool").send({"tool_name": "x"}).result() == (0, "", "")


def test_post_tool_never_blocks_even_when_gate_is_down(offering: Live) -> None:
    payload = post_tool(bash("deploy prod"), {"stdout": ""})
    hook = HookProcess.start(f"http://127.0.0.1:{free_port()}", cfg.AGENT, ["--event", "post-tool"])
    code, out, err = hook.send(payload).result()

    assert (code, out) == (0, "")
    assert err.startswith("gate hook --event post-tool: could not look up the request")


# -- cancel on session end ------------------------------------------------------------------


def test_session_end_withdraws_the_session_and_the_waiting_hook_is_told(offering: Live) -> None:
    session = str(uuid.uuid4())
    waiting = offering.hook().send(bash("deploy api", session_id=session))
    first = offering.wait_pending("Bash", session)
    second_payload = bash("deploy web", session_id=session)
    with offering.api(cfg.AGENT) as c:
        second = c.post(
            "/v1/gate",
            json={
                "tool_name": "Bash",
                "tool_args": second_payload["tool_input"],
                "session_id": session,
                "idempotency_key": second_payload["tool_use_id"],
            },
        ).json()["request"]
    elsewhere = offering.hook().send(bash("deploy other"))

    result = offering.hook("--event", "session-end").send(session_end(session)).result()

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
        assert get(offering, f"/v1/requests/{request_id}")["status"] == "cancelled"
        # the outbox updates the request's cards (here the log channel's)
        wait_until(lambda rid=request_id: ("update", "sent") in deliveries(offering, rid), 20)
    other = wait_until(lambda: offering.pending("Bash", None), 20)
    assert other["session_id"] != session
    with offering.api(cfg.AGENT) as c:
        c.post(f"/v1/requests/{other['id']}/cancel", json={"reason": "test over"})
    assert elsewhere.json()[0] == 0


def test_session_end_also_reads_the_event_from_its_input(offering: Live) -> None:
    session = str(uuid.uuid4())
    waiting = offering.hook().send(bash("deploy api", session_id=session))
    offering.wait_pending("Bash", session)

    assert offering.hook().send(session_end(session, "clear")).result() == (0, "", "")

    reason = waiting.json()[1]["hookSpecificOutput"]["permissionDecisionReason"]
    assert "(Cancelled by billing-agent: the Claude Code session ended (clear))" in reason
