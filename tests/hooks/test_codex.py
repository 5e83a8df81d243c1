"""`gate hook --format codex` end to end: a real gate, Codex-shaped inputs
(fixtures/codex_*.json), the real hook process; every answer is checked against what Codex
does with it (`codex_outcome`, restating Codex's parser, see fixtures/README.md)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from tests.hooks.conftest import FIXTURES, HookProcess, Live, run_hook
from tests.support import config as cfg
from tests.support.servers import free_port

# -- what Codex does with an answer -----------------------------------------------------------

_UNIVERSAL = {"continue", "stopReason", "suppressOutput", "systemMessage"}
_PRE_TOP = _UNIVERSAL | {"decision", "reason", "hookSpecificOutput"}
_PRE_SPECIFIC = {
    "hookEventName",
    "permissionDecision",
    "permissionDecisionReason",
    "updatedInput",
    "additionalContext",
}
_PERMISSION_TOP = _UNIVERSAL | {"hookSpecificOutput"}
_PERMISSION_DECISION = {"behavior", "updatedInput", "updatedPermissions", "message", "interrupt"}


def codex_outcome(event: str, code: int, stdout: str, stderr: str) -> tuple[str, Any]:
    """What Codex makes of a hook's exit code and output: ("block", reason), ("allow", None),
    ("rewrite", input), ("no-decision", None) or ("failed", why). A failed hook does not
    block: in PreToolUse the call runs, in PermissionRequest the normal prompt follows."""
    if code == 2:
        return ("block", stderr.strip()) if stderr.strip() else ("failed", "exit 2, no stderr")
    if code != 0:
        return "failed", f"exit {code}"
    if not stdout.strip():
        return "no-decision", None
    try:
        out = json.loads(stdout)
    except ValueError:
        return ("failed", "invalid JSON") if stdout.lstrip()[:1] in "{[" else ("no-decision", None)
    if not isinstance(out, dict):
        return "failed", "not an object"
    if out.get("continue", True) is not True or "stopReason" in out or out.get("suppressOutput"):
        return "failed", "unsupported universal field"
    specific = out.get("hookSpecificOutput")
    if event == "PermissionRequest":
        if set(out) - _PERMISSION_TOP or not isinstance(specific, dict):
            return "failed", "unknown field"
        decision = specific.get("decision")
        if set(specific) - {"hookEventName", "decision"} or not isinstance(decision, dict):
            return "failed", "unknown field"
        if set(decision) - _PERMISSION_DECISION:
            return "failed", "unknown field"
        if (
            "updatedInput" in decision
            or "updatedPermissions" in decision
            or decision.get("interrupt")
        ):
            return "failed", "unsupported field"
        if decision.get("behavior") == "allow":
            return "allow", None
        if decision.get("behavior") == "deny":
            return "block", decision.get("message") or "PermissionRequest hook denied approval"
        return "failed", "unknown behavior"
    if set(out) - _PRE_TOP or (specific is not None and set(specific) - _PRE_SPECIFIC):
        return "failed", "unknown field"
    if isinstance(specific, dict) and (
        {"permissionDecision", "permissionDecisionReason", "updatedInput"} & set(specific)
    ):
        decision = specific.get("permissionDecision")
        if decision == "allow" and "updatedInput" in specific:
            return "rewrite", specific["updatedInput"]
        if decision == "deny" and str(specific.get("permissionDecisionReason") or "").strip():
            return "block", specific["permissionDecisionReason"].strip()
        return "failed", f"unsupported permissionDecision {decision!r}"
    if out.get("decision") == "block" and str(out.get("reason") or "").strip():
        return "block", out["reason"].strip()
    if "decision" in out or "reason" in out:
        return "failed", "unsupported legacy decision"
    return "no-decision", None


@pytest.mark.parametrize(
    ("event", "code", "stdout", "stderr", "expected"),
    [
        (
            "PreToolUse",
            0,
            '{"hookSpecificOutput": {"hookEventName": "PreToolUse", '
            '"permissionDecision": "ask", "permissionDecisionReason": "?"}}',
            "",
            "failed",
        ),
        (
            "PreToolUse",
            0,
            '{"hookSpecificOutput": {"hookEventName": "PreToolUse", '
            '"permissionDecision": "allow"}}',
            "",
            "failed",
        ),
        ("PreToolUse", 0, '{"continue": false, "reason": "no"}', "", "failed"),
        ("PreToolUse", 2, "", "", "failed"),
        ("PreToolUse", 1, "", "boom", "failed"),
        ("PreToolUse", 2, "", "blocked by policy\n", "block"),
        (
            "PermissionRequest",
            0,
            '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", '
            '"decision": {"behavior": "allow", "updatedInput": {}}}}',
            "",
            "failed",
        ),
    ],
)
def test_the_codex_rules_restated(
    event: str, code: int, stdout: str, stderr: str, expected: str
) -> None:
    # The cases Codex's own tests pin (pre_tool_use.rs, output_parser.rs): the answers that
    # look like a "no" or an "ask" but let the call run.
    assert codex_outcome(event, code, stdout, stderr)[0] == expected


# -- inputs ---------------------------------------------------------------------------------


def codex(name: str, **changes: Any) -> dict[str, Any]:
    """A Codex hook input from fixtures/, with a session and call id of its own."""
    payload: dict[str, Any] = json.loads((FIXTURES / f"codex_{name}.json").read_text())
    tool_input = changes.pop("tool_input", None)
    if tool_input:
        payload["tool_input"] = {**payload["tool_input"], **tool_input}
    payload["session_id"] = str(uuid.uuid4())
    if "tool_use_id" in payload:
        payload["tool_use_id"] = f"call_{uuid.uuid4().hex[:24]}"
    payload.update(changes)
    return payload


RM = {"command": "rm -rf build/"}


def answer(live_url: str | None, payload: Any, *args: str, **kw: Any) -> tuple[str, Any]:
    """Run `gate hook --format codex ARGS` and say what Codex makes of its answer."""
    code, out, err = run_hook(live_url, json.dumps(payload), "--format", "codex", *args, **kw)
    stdout = json.dumps(out) if out is not None else ""
    return codex_outcome(payload.get("hook_event_name", "PreToolUse"), code, stdout, err)


def start(live: Live, payload: dict[str, Any], *args: str) -> HookProcess:
    """A `gate hook --format codex` process that is asking about `payload`."""
    return live.hook("--format", "codex", *args).send(payload)


def outcome_of(hook: HookProcess, payload: dict[str, Any]) -> tuple[str, Any]:
    """What Codex makes of the hook's answer once it exits."""
    code, out, err = hook.result()
    return codex_outcome(payload["hook_event_name"], code, out, err)


# -- PreToolUse -----------------------------------------------------------------------------


def test_rejected_blocks_with_the_reason_on_stderr(live: Live) -> None:
    payload = codex("pretooluse_bash", tool_input=RM)
    hook = start(live, payload)
    request = live.wait_pending("Bash", payload["session_id"])
    live.decide(request["id"], cfg.BOB, "reject", "not on a Friday")

    assert outcome_of(hook, payload) == (
        "block",
        "gate: Rejected by bob in the API: not on a Friday. A person reviewed this Bash call and "
        "said no, so it was not run. Do not retry it unchanged: take the comment into account, "
        "change the approach or ask the user.",
    )


def test_approved_is_no_decision_so_codex_policy_goes_on(live: Live) -> None:
    payload = codex("pretooluse_bash", tool_input=RM)
    hook = start(live, payload)
    request = live.wait_pending("Bash", payload["session_id"])
    live.decide(request["id"], cfg.ALICE, "approve")

    # Codex has no bare "allow" in PreToolUse: it fails the hook. Silence lets the call on.
    assert outcome_of(hook, payload) == ("no-decision", None)
    key, context = live.context(request["id"])
    assert key == payload["tool_use_id"]
    assert request["agent_id"] == "codex"
    assert context["source"] == "codex"
    assert (context["turn_id"], context["model"]) == (payload["turn_id"], "gpt-5.4")


def test_policy_deny_and_allow(live: Live) -> None:
    drop = codex("pretooluse_mcp", tool_input={"query": "DROP TABLE profiles"})
    select = codex("pretooluse_mcp")

    assert answer(live.url, drop) == (
        "block",
        "gate: Blocked by rule 'no-ddl': No schema changes from agents. This is a standing "
        "policy, not a person's decision: do not retry this call; take another approach or ask "
        "the user.",
    )
    assert answer(live.url, select) == ("no-decision", None)


def test_apply_patch_is_asked_about_with_the_patch(live: Live) -> None:
    payload = codex("pretooluse_apply_patch")
    hook = start(live, payload, "--on-no-rule", "deny")

    verdict = outcome_of(hook, payload)

    # No rule names apply_patch in the test policy: --on-no-rule deny blocks it.
    assert verdict == ("block", "gate: No rule covers this apply_patch call.")


def test_no_rule_defers_and_ask_is_a_block(live: Live) -> None:
    payload = codex("pretooluse_bash")  # `pwd`: no rule

    assert answer(live.url, payload) == ("no-decision", None)
    kind, reason = answer(live.url, codex("pretooluse_bash"), "--on-no-rule", "ask")
    assert kind == "block"
    assert reason.endswith(
        "Codex's PreToolUse hook cannot ask a person locally, so it was blocked (--on-no-rule ask)."
    )


def test_edits_are_a_deny_naming_them_unless_codex_can_apply_them(live: Live) -> None:
    results = []
    for flags in ([], ["--apply-edits"]):
        payload = codex("pretooluse_bash", tool_input=RM)
        hook = start(live, payload, *flags)
        request = live.wait_pending("Bash", payload["session_id"])
        with live.api(cfg.ALICE) as c:
            r = c.post(
                f"/v1/requests/{request['id']}/decision",
                json={"verdict": "approve", "edited_args": {"command": "rm -rf build/tmp"}},
            )
        assert r.status_code == 200, r.text
        results.append(outcome_of(hook, payload))

    kind, reason = results[0]
    assert kind == "block"
    assert reason.startswith("gate: Approved with edits by alice in the API")
    assert reason.endswith(
        "This hook cannot make the agent run the call with the approver's arguments, so the "
        "call as sent was blocked and nothing ran. To go ahead, make the call again with "
        'exactly these arguments (it is asked about again): {"command": "rm -rf build/tmp"}'
    )
    assert results[1] == ("rewrite", {"command": "rm -rf build/tmp"})


def test_gate_down_blocks_and_fail_open_defers() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    kind, reason = answer(url, codex("pretooluse_bash", tool_input=RM))
    opened = answer(url, codex("pretooluse_bash", tool_input=RM), "--fail-open")

    assert kind == "block"
    assert "could not be reached (connection refused)" in reason
    assert opened == ("no-decision", None)


def test_bad_input_blocks(live: Live) -> None:
    code, out, err = run_hook(live.url, "{not json", "--format", "codex")

    assert codex_outcome("PreToolUse", code, "", err) == (
        "block",
        "gate: The hook could not read its input (stdin is not valid JSON), so the call was "
        "blocked to be safe. Nobody reviewed it.",
    )


# -- PermissionRequest -----------------------------------------------------------------------


def test_permission_request_allow_deny_and_no_decision(live: Live) -> None:
    payload = codex("permissionrequest_bash")
    hook = start(live, payload)
    request = live.wait_pending("Bash", payload["session_id"])
    key, _ = live.context(request["id"])
    assert key is not None and key.startswith("codex-PermissionRequest:")
    live.decide(request["id"], cfg.ALICE, "approve")
    assert outcome_of(hook, payload) == ("allow", None)

    again = codex("permissionrequest_bash")
    hook = start(live, again)
    request = live.wait_pending("Bash", again["session_id"])
    live.decide(request["id"], cfg.BOB, "reject", "use make clean")
    kind, reason = outcome_of(hook, again)
    assert kind == "block"
    assert reason.startswith("gate: Rejected by bob in the API: use make clean.")

    unruled = codex("permissionrequest_bash", tool_input={"command": "ls"})
    # No rule, even with --on-no-rule ask: Codex's own prompt is the ask.
    assert answer(live.url, unruled, "--on-no-rule", "ask") == ("no-decision", None)


# -- after the call --------------------------------------------------------------------------


def test_post_tool_use_records_the_outcome(live: Live) -> None:
    pre = codex("pretooluse_bash", tool_input=RM)
    hook = start(live, pre)
    request = live.wait_pending("Bash", pre["session_id"])
    live.decide(request["id"], cfg.ALICE, "approve")
    assert outcome_of(hook, pre)[0] == "no-decision"
    post = codex("posttooluse_bash", tool_input=RM)
    post.update(session_id=pre["session_id"], tool_use_id=pre["tool_use_id"])

    code, out, err = run_hook(live.url, post, "--format", "codex")

    assert (code, out, err) == (0, None, "")
    with live.api() as c:
        recorded = c.get(f"/v1/requests/{request['id']}").json()
    assert recorded["outcome"] == "ran"
