"""What a decision carries beyond yes/no, through the real `gate hook` process and a real
gate: edits reach the agent as `updatedInput`, approvals are bound to the call, rules can
forbid edits, grants allow at once, preset reject reasons reach the model."""

from __future__ import annotations

import uuid

from gate.asking.binding import call_hash
from tests.hooks.conftest import Live, bash, post_decision, run_hook
from tests.support import config as cfg
from tests.support.servers import wait_until

# -- approve with edits ---------------------------------------------------------------------


def test_edits_reach_claude_code_as_the_full_updated_input(offering: Live) -> None:
    payload = bash("deploy prod")
    hook = offering.hook().send(payload)
    request = offering.wait_pending("Bash", payload["session_id"])
    edited = {**payload["tool_input"], "command": "deploy staging"}
    approved = post_decision(
        offering,
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


def test_edits_reach_a_permission_request_hook(offering: Live) -> None:
    payload = {**bash("deploy prod"), "hook_event_name": "PermissionRequest"}
    del payload["tool_use_id"]
    hook = offering.hook("--event", "permission-request").send(payload)
    request = offering.wait_pending("Bash", payload["session_id"])
    edited = {"command": "deploy staging"}
    post_decision(offering, request["id"], cfg.BOB, {"verdict": "approve", "edited_args": edited})

    code, out, _ = hook.json()

    assert code == 0
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow", "updatedInput": edited},
        }
    }


def test_edits_reach_the_command_dialect_in_its_stdout(offering: Live) -> None:
    session = str(uuid.uuid4())
    payload = {
        "event": "tool.pre",
        "toolName": "pay_vendor",
        "toolInput": {"amount": 90000, "vendor": "acme"},
        "toolCallId": f"call_{uuid.uuid4().hex[:12]}",
        "sessionId": session,
    }
    hook = offering.hook("--format", "command").send(payload)
    request = offering.wait_pending("pay_vendor", session)
    edited = {"amount": 60000, "vendor": "acme"}
    post_decision(offering, request["id"], cfg.ALICE, {"verdict": "approve", "edited_args": edited})

    code, out, err = hook.json()

    assert (code, err) == (0, "")
    assert out == {
        "continue": True,
        "reason": "gate: Approved with edits by alice in the API Changed: amount 90000 -> 60000. "
        "The pay_vendor call runs with the arguments as the approver edited them, not as they "
        "were sent.",
        "updatedInput": edited,
    }


def test_approved_as_asked_has_no_updated_input(offering: Live) -> None:
    payload = bash("deploy prod")
    hook = offering.hook().send(payload)
    request = offering.wait_pending("Bash", payload["session_id"])
    post_decision(offering, request["id"], cfg.ALICE, {"verdict": "approve"})

    _, out, _ = hook.json()

    assert "updatedInput" not in out["hookSpecificOutput"]
    assert out["hookSpecificOutput"]["permissionDecision"] == "allow"


# -- approval bound to the call -------------------------------------------------------------


def test_a_reused_call_id_with_other_arguments_is_denied(offering: Live) -> None:
    first = bash("deploy prod")
    hook = offering.hook().send(first)
    request = offering.wait_pending("Bash", first["session_id"])
    post_decision(offering, request["id"], cfg.ALICE, {"verdict": "approve"})
    assert hook.json()[1]["hookSpecificOutput"]["permissionDecision"] == "allow"

    # (b) the same tool_use_id, other arguments: the server refuses to carry the approval over
    replay = {**first, "tool_input": {**first["tool_input"], "command": "deploy prod --force"}}
    with offering.api(cfg.AGENT) as c:
        r = c.post(
            "/v1/gate",
            json={
                "tool_name": "Bash",
                "tool_args": replay["tool_input"],
                "idempotency_key": first["tool_use_id"],
            },
        )
    assert r.status_code == 409 and r.json()["error"]["code"] == "idempotency_key_reused"

    code, out, _ = run_hook(offering.url, replay)

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


def test_rules_can_forbid_edits_so_the_agent_runs_what_it_asked(offering: Live) -> None:
    payload = bash("sudo reboot")
    hook = offering.hook().send(payload)
    request = offering.wait_pending("Bash", payload["session_id"])
    with offering.api(cfg.ALICE) as c:
        r = c.post(
            f"/v1/requests/{request['id']}/decision",
            json={"verdict": "approve", "edited_args": {"command": "sudo true"}},
        )
    assert r.status_code == 422 and r.json()["error"]["code"] == "edits_not_allowed"
    post_decision(offering, request["id"], cfg.ALICE, {"verdict": "approve"})

    _, out, _ = hook.json()

    assert out["hookSpecificOutput"]["permissionDecision"] == "allow"
    assert "updatedInput" not in out["hookSpecificOutput"]


# -- grants ---------------------------------------------------------------------------------


def test_a_session_grant_allows_the_next_call_at_once(offering: Live) -> None:
    session = str(uuid.uuid4())
    first = bash("deploy api", session_id=session)
    hook = offering.hook().send(first)
    request = offering.wait_pending("Bash", session)
    post_decision(
        offering,
        request["id"],
        cfg.ALICE,
        {"verdict": "approve", "grant": {"scope": "session", "duration": "30m"}},
    )
    assert hook.json()[1]["hookSpecificOutput"]["permissionDecision"] == "allow"

    code, out, err = run_hook(offering.url, bash("deploy web", session_id=session))

    assert (code, err) == (0, "")
    output = out["hookSpecificOutput"]
    assert output["permissionDecision"] == "allow"
    reason = output["permissionDecisionReason"]
    assert reason.startswith("gate: Allowed by a grant from alice (scope: session, until ")
    assert reason.endswith(f"made when approving request {request['id']}.")
    assert offering.pending("Bash", session) is None  # nobody was asked

    other_session = offering.hook().send(bash("deploy web"))
    pending = wait_until(lambda: offering.pending("Bash", None), 20)
    assert pending["session_id"] != session
    with offering.api(cfg.AGENT) as c:
        c.post(f"/v1/requests/{pending['id']}/cancel", json={"reason": "test over"})
    assert other_session.json()[1]["hookSpecificOutput"]["permissionDecision"] == "deny"


# -- preset reject reasons ------------------------------------------------------------------


def test_preset_reject_reasons_reach_the_model(offering: Live) -> None:
    payload = bash("deploy prod")
    hook = offering.hook().send(payload)
    request = offering.wait_pending("Bash", payload["session_id"])
    assert request["options"]["reject_reasons"] == ["wrong environment", "too risky"]
    post_decision(
        offering,
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
