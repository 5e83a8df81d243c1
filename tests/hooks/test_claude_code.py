"""`gate hook --format claude-code` end to end: a real gate (a `gate serve` process where the
test kills or restarts it), real Claude Code payloads, the real hook process, decisions through
the API; exact stdout JSON and exit codes."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.hooks.conftest import Live, LiveProcess, fixture, run_hook, serve_in_thread
from tests.support import config as cfg
from tests.support.databases import migrated_sqlite
from tests.support.servers import free_port, wait_until


def pre_tool_use(decision: str, reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }


def fresh(name: str, **changes: Any) -> dict[str, Any]:
    """A fixture with its own session and tool_use_id, so tests sharing a server never meet."""
    return fixture(
        name,
        session_id=str(uuid.uuid4()),
        tool_use_id=f"toolu_{uuid.uuid4().hex[:24]}",
        **changes,
    )


RM = {"command": "rm -rf build/ 2>&1"}


# -- a person decides -------------------------------------------------------------------------


def test_approved_in_the_api_allows_with_the_approver_named(live: Live) -> None:
    payload = fresh("bash", tool_input=RM)
    hook = live.hook("--format", "claude-code").send(payload)
    request = live.wait_pending("Bash", payload["session_id"])
    assert request["summary"] == "Bash: rm -rf build/ 2>&1"
    assert request["rule"] == "risky-bash"
    live.decide(request["id"], cfg.ALICE, "approve", "build dir only, fine")

    code, out, err = hook.json()

    assert (code, err) == (0, "")
    assert out == pre_tool_use("allow", "gate: Approved by alice in the API: build dir only, fine.")


def test_rejected_with_a_comment_denies_with_the_comment_for_the_model(live: Live) -> None:
    payload = fresh("edit")
    hook = live.hook().send(payload)
    request = live.wait_pending("Edit", payload["session_id"])
    live.decide(request["id"], cfg.BOB, "reject", "pin the version instead")

    code, out, _ = hook.json()

    assert code == 0
    assert out == pre_tool_use(
        "deny",
        "gate: Rejected by bob in the API: pin the version instead. A person reviewed this Edit "
        "call and said no, so it was not run. Do not retry it unchanged: take the comment into "
        "account, change the approach or ask the user.",
    )


def test_nobody_answers_before_the_rule_deadline_denies_as_expired(live: Live) -> None:
    code, out, _ = run_hook(live.url, fresh("write"))

    assert code == 0
    assert out == pre_tool_use(
        "deny",
        "gate: Nobody answered within 1s (rule 'kotlin-writes'), so the call was not run. "
        "No human rejected it: ask the user whether to try again later.",
    )


def test_cancelled_request_denies_saying_nobody_rejected_it(live: Live) -> None:
    payload = fresh("bash", tool_input=RM)
    hook = live.hook().send(payload)
    request = live.wait_pending("Bash", payload["session_id"])
    with live.api(cfg.AGENT) as c:
        r = c.post(f"/v1/requests/{request['id']}/cancel", json={"reason": "user pressed Esc"})
    assert r.status_code == 200, r.text

    code, out, _ = hook.json()

    assert code == 0
    assert out == pre_tool_use(
        "deny",
        "gate: The approval request for this Bash call was withdrawn before anyone decided "
        "(Cancelled by billing-agent: user pressed Esc). The call was not run; no human "
        "rejected it.",
    )


def test_the_request_expires_with_the_hooks_own_deadline(live: Live) -> None:
    payload = fresh("bash", tool_input=RM)  # the rule waits 10m; the hook only 2 s

    code, out, _ = run_hook(live.url, payload, "--timeout", "2")

    request = wait_until(lambda: _only(live, "Bash", payload["session_id"]))
    lived = datetime.fromisoformat(request["expires_at"]) - datetime.fromisoformat(
        request["created_at"]
    )
    assert code == 0
    # Sent as expires_in: a margin before the hook gives up, so the server's expiry ends it.
    assert timedelta(seconds=0.9) <= lived <= timedelta(seconds=1)
    assert request["status"] == "expired"
    assert out == pre_tool_use("deny", f"gate: {request['reason']}")
    assert request["reason"].startswith("Nobody answered within")


def _only(live: Live, tool: str, session: str) -> dict[str, Any] | None:
    with live.api() as c:
        items = c.get("/v1/requests", params={"tool_name": tool, "session_id": session}).json()
    found = items["items"]
    assert len(found) <= 1
    return found[0] if found and found[0]["status"] != "pending" else None


def test_the_same_tool_use_id_is_one_request(live: Live) -> None:
    payload = fresh("bash", tool_input=RM)
    first = live.hook().send(payload)
    request = live.wait_pending("Bash", payload["session_id"])
    second = live.hook().send(payload)
    live.decide(request["id"], cfg.ALICE, "approve")

    expected = pre_tool_use("allow", "gate: Approved by alice in the API.")
    assert first.json()[:2] == (0, expected)
    assert second.json()[:2] == (0, expected)
    with live.api() as c:
        items = c.get("/v1/requests", params={"session_id": payload["session_id"]}).json()
    assert len(items["items"]) == 1


def test_claude_code_facts_go_into_the_request(live: Live) -> None:
    payload = fixture(
        "bash_subagent", session_id=str(uuid.uuid4()), tool_input={"command": "rm -r lib/old"}
    )
    hook = live.hook().send(payload)
    request = live.wait_pending("Bash", payload["session_id"])
    live.decide(request["id"], cfg.ALICE, "approve")
    assert hook.json()[0] == 0

    key, context = live.context(request["id"])
    assert key == payload["tool_use_id"]
    assert request["agent_id"] == "claude-code"
    assert request["session_id"] == payload["session_id"]
    assert context == {
        "session_id": payload["session_id"],
        "cwd": payload["cwd"],
        "permission_mode": "default",
        "agent_id": "ac350c3ffa4a9f251",
        "agent_type": "Explore",
        "hook_event_name": "PreToolUse",
        "transcript_path": payload["transcript_path"],
        "source": "claude-code",
        # the agent's id of the call: gate's spans carry it (docs/tracing.md)
        "tool_call_id": payload["tool_use_id"],
    }


# -- policy answers without a person ------------------------------------------------------------


def test_policy_allow(live: Live) -> None:
    code, out, _ = run_hook(live.url, fresh("mcp"))

    assert code == 0
    assert out == pre_tool_use("allow", "gate: Allowed by rule 'sql-reads'.")


def test_policy_deny_gives_the_rule_and_its_reason(live: Live) -> None:
    code, out, _ = run_hook(live.url, fresh("mcp", tool_input={"query": "DROP TABLE profiles"}))

    assert code == 0
    assert out == pre_tool_use(
        "deny",
        "gate: Blocked by rule 'no-ddl': No schema changes from agents. This is a standing "
        "policy, not a person's decision: do not retry this call; take another approach or ask "
        "the user.",
    )


def test_no_rule_prints_nothing_so_claude_code_decides(live: Live) -> None:
    code, out, err = run_hook(live.url, fresh("bash_effort"))

    assert (code, out) == (0, None)
    assert err == "gate: No rule covers this Bash call.\n"  # debug log only


def test_no_rule_can_allow_or_ask(live: Live) -> None:
    reason = "gate: No rule covers this Bash call."

    allow = run_hook(live.url, fresh("bash"), "--on-no-rule", "allow")
    ask = run_hook(live.url, fresh("bash"), "--on-no-rule", "ask")

    assert allow[:2] == (0, pre_tool_use("allow", reason))
    assert ask[:2] == (0, pre_tool_use("ask", reason))


# -- the gate is down, or comes back ------------------------------------------------------------


def test_server_down_before_the_call_denies_fail_closed() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    code, out, _ = run_hook(url, fresh("bash", tool_input=RM))

    assert code == 0
    assert out == pre_tool_use(
        "deny",
        f"gate: The approval server at {url} could not be reached (connection refused), so this "
        "Bash call was blocked to be safe. Nobody reviewed it. Tell the user the gate server is "
        "down: start it with `gate serve`, or point GATE_URL (or --url) at it.",
    )


def test_server_killed_during_the_wait_denies_fail_closed(own_live: LiveProcess) -> None:
    payload = fresh("edit")
    hook = own_live.hook("--timeout", "3").send(payload)
    request = own_live.wait_pending("Edit", payload["session_id"])
    own_live.server.kill()

    code, out, _ = hook.json()

    assert code == 0
    assert out == pre_tool_use(
        "deny",
        f"gate: Lost contact with the approval server at {own_live.url} while waiting for a "
        f"decision on request {request['id']} (connection refused), and it did not come back "
        "within the hook's 3 s limit, so this Edit call was blocked to be safe. No human "
        "rejected it: tell the user the gate server went down.",
    )


def test_server_restarted_during_the_wait_still_delivers_the_verdict(own_live: LiveProcess) -> None:
    payload = fresh("edit")
    hook = own_live.hook("--timeout", "60").send(payload)
    request = own_live.wait_pending("Edit", payload["session_id"])
    own_live.server.kill()
    own_live.server.start()
    own_live.decide(request["id"], cfg.ALICE, "approve", "after the restart")

    code, out, _ = hook.json()

    assert code == 0
    assert out == pre_tool_use("allow", "gate: Approved by alice in the API: after the restart.")


def test_fail_open_lets_claude_code_decide_when_the_gate_is_down() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    code, out, err = run_hook(url, fresh("bash", tool_input=RM), "--fail-open")

    assert (code, out) == (0, None)
    assert err.startswith("WARNING: gate hook runs with --fail-open")
    assert "NOT blocking this call" in err


# -- configuration mistakes are a deny with the fix ---------------------------------------------


def test_missing_token_denies_with_the_fix(live: Live) -> None:
    code, out, _ = run_hook(live.url, fresh("bash", tool_input=RM), token=None)

    reason = out["hookSpecificOutput"]["permissionDecisionReason"]
    assert code == 0
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "HTTP 401 missing_token" in reason
    assert reason.endswith(
        "no token was sent: set GATE_TOKEN (or --token) to an agent token from gate.toml "
        '[[tokens]] (role = "agent").'
    )


def test_approver_token_is_not_an_agent_token(live: Live) -> None:
    code, out, _ = run_hook(live.url, fresh("bash", tool_input=RM), token=cfg.ALICE)

    reason = out["hookSpecificOutput"]["permissionDecisionReason"]
    assert (code, out["hookSpecificOutput"]["permissionDecision"]) == (0, "deny")
    assert 'use a token whose role is "agent"' in reason


def test_bad_url_and_bad_input_deny(live: Live) -> None:
    bad_url = run_hook("ftp://gate", fresh("bash"))
    bad_input = run_hook(live.url, "{not json")
    no_tool = run_hook(live.url, {"session_id": "s"})

    assert bad_url[1] == pre_tool_use(
        "deny",
        "gate: The gate URL 'ftp://gate' is not an http(s) URL, so this Bash call was blocked. "
        "Tell the user to set GATE_URL (or --url), e.g. http://127.0.0.1:8000.",
    )
    assert bad_input[1] == pre_tool_use(
        "deny",
        "gate: The hook could not read its input (stdin is not valid JSON), so the call was "
        "blocked to be safe. Nobody reviewed it.",
    )
    assert (
        "no tool_name in the hook input"
        in no_tool[1]["hookSpecificOutput"]["permissionDecisionReason"]
    )
    assert {bad_url[0], bad_input[0], no_tool[0]} == {0}


def test_anonymous_loopback_server_needs_no_token(tmp_path: Path) -> None:
    # `gate serve` itself serving a token-less gate.toml on loopback: tests/test_docs.py
    data = {
        "server": {"database_url": migrated_sqlite(tmp_path / "gate.db")},
        "rules": [{"name": "reads", "tools": ["Bash"], "action": "allow"}],
    }
    with serve_in_thread(tmp_path, data) as anonymous:
        code, out, _ = run_hook(anonymous.url, fresh("bash"), token=None)
    assert (code, out) == (0, pre_tool_use("allow", "gate: Allowed by rule 'reads'."))


# -- PermissionRequest ---------------------------------------------------------------------------


def permission_request(**changes: Any) -> dict[str, Any]:
    payload = fresh("bash", tool_input=RM, hook_event_name="PermissionRequest", **changes)
    del payload["tool_use_id"]
    payload["permission_suggestions"] = [
        {"type": "addRules", "rules": [{"toolName": "Bash"}], "behavior": "allow"}
    ]
    return payload


def test_permission_request_allow_and_deny(live: Live) -> None:
    payload = permission_request()
    hook = live.hook("--event", "permission-request").send(payload)
    request = live.wait_pending("Bash", payload["session_id"])
    key, _ = live.context(request["id"])
    assert key is not None and key.startswith("cc-PermissionRequest:")
    live.decide(request["id"], cfg.ALICE, "reject", "not today")

    code, out, _ = hook.json()

    assert code == 0
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {
                "behavior": "deny",
                "message": "gate: Rejected by alice in the API: not today. A person reviewed this "
                "Bash call and said no, so it was not run. Do not retry it unchanged: take the "
                "comment into account, change the approach or ask the user.",
            },
        }
    }

    # The same call again in the same session is a new question, not the old answer.
    again = live.hook().send(payload)  # event detected from hook_event_name
    second = wait_until(lambda: live.pending("Bash", payload["session_id"]))
    assert second["id"] != request["id"]
    live.decide(second["id"], cfg.BOB, "approve")
    code, out, _ = again.json()
    assert code == 0
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"},
        }
    }
