"""What each agent runtime sends `gate hook` and which answers it accepts.

Claude Code (`PreToolUse`, `PermissionRequest`, `PostToolUse[Failure]`, `SessionEnd`), Codex
(the same events, answered only in the shapes Codex accepts, because it runs the call on any
other) and the command-hook convention (`tool_name`/`toolName`/`tool_call`, exit 0 allows,
exit 2 blocks with the reason on stderr). Reading turns a payload into a `Call` (or an
after-call flow); answering turns a `Verdict` into the runtime's stdout, stderr and exit code.
Standard library only: `gate hook` imports this on every tool call.
"""

from __future__ import annotations

import json

from gate.asking.aftercall import end_session, outcome_of, report_outcome
from gate.asking.toolcall import GATE_DOWN, Call, Verdict, derived_key, summarise
from gate.asking.wording import clip, edits_not_applied

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Generator
    from typing import Any

    from gate.asking.aftercall import Report
    from gate.asking.exchange import Reply, Step

    AfterFlow = Generator[Step, Reply | None, Report]

# -- reading the agent's input ----------------------------------------------------------------


class BadInput(Exception):
    """The hook's stdin is not something we can ask about."""


_CLAUDE_CONTEXT = (
    "session_id",
    "cwd",
    "permission_mode",
    "agent_id",
    "agent_type",
    "prompt_id",
    "hook_event_name",
    "transcript_path",
    "turn_id",  # Codex
    "model",  # Codex
)


def parse_claude(
    payload: Any, ns: argparse.Namespace, source: str = "claude-code"
) -> tuple[Call, str]:
    """A Claude Code (or Codex, `source="codex"`) PreToolUse / PermissionRequest payload ->
    (Call, event name). The two send the same fields; Codex adds turn_id and model."""
    if not isinstance(payload, dict):
        raise BadInput("stdin is not a JSON object")
    tool = payload.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise BadInput("no tool_name in the hook input")
    args = payload.get("tool_input", {})
    if not isinstance(args, dict):
        raise BadInput("tool_input is not a JSON object")
    event = event_name(ns.event, payload.get("hook_event_name"))
    session = _str(payload.get("session_id"))
    context = {k: payload[k] for k in _CLAUDE_CONTEXT if payload.get(k) is not None}
    context["source"] = source
    tool_use_id = _str(payload.get("tool_use_id"))
    if tool_use_id:  # the agent's own id of the call: gate's spans carry it (docs/tracing.md)
        context["tool_call_id"] = tool_use_id
    if event == "PreToolUse" and tool_use_id:
        key, derived = tool_use_id, False
    else:
        prefix = "cc-" if source == "claude-code" else f"{source}-"
        key, derived = derived_key(prefix + event, session, tool, args), True
    call = Call(
        tool_name=tool,
        tool_args=args,
        agent_id=ns.agent_id or source,
        user_id=ns.user_id,
        session_id=session,
        idempotency_key=key,
        summary=summarise(tool, args),
        metadata=dict(ns.metadata),
        context=context,
        derived_key=derived,
        # the model's own words on the call: Claude Code's `description` (Bash has one)
        justification=_str(args.get("description")),
    )
    return call, event


def parse_command(payload: Any, ns: argparse.Namespace) -> Call:
    """A command-hook payload (`tool_name`/`tool_input`, `toolName`/`toolInput`, or
    `tool_call.name`/`tool_call.arguments`) -> Call."""
    if not isinstance(payload, dict):
        raise BadInput("stdin is not a JSON object")
    nested = _nested(payload)
    tool = payload.get("tool_name") or payload.get("toolName") or nested.get("name")
    if not isinstance(tool, str) or not tool:
        raise BadInput("no tool_name, toolName or tool_call.name in the hook input")
    args: Any = payload.get("tool_input", payload.get("toolInput", nested.get("arguments", {})))
    if isinstance(args, str):
        # OpenAI-style tool calls carry their arguments as a JSON string.
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            raise BadInput("tool_call.arguments is not valid JSON") from exc
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise BadInput("the tool arguments are not a JSON object")
    session = _str(payload.get("session_id") or payload.get("sessionId"))
    call_id = _call_id(payload)
    context: dict[str, Any] = {"source": "command"}
    for name in ("event", "hook_event_name", "cwd", "session_id", "sessionId"):
        if payload.get(name) is not None:
            context[name] = payload[name]
    if call_id is not None:
        context["tool_call_id"] = call_id
    return Call(
        tool_name=tool,
        tool_args=args,
        agent_id=ns.agent_id or _str(payload.get("agent_id") or payload.get("agentId")),
        user_id=ns.user_id,
        session_id=session,
        idempotency_key=call_id or derived_key("cmd", session, tool, args),
        summary=summarise(tool, args),
        metadata=dict(ns.metadata),
        context=context,
        derived_key=call_id is None,
        justification=_str(payload.get("justification")),
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def event_name(flag: str, given: Any) -> str:
    """The Claude Code / Codex event being answered: `--event`, else the input's own."""
    if flag == "permission-request":
        return "PermissionRequest"
    if flag == "pre-tool-use":
        return "PreToolUse"
    return "PermissionRequest" if given == "PermissionRequest" else "PreToolUse"


#: event names in hook inputs that mean "after the call" / "the session ended"
_AFTER_EVENTS = {
    "PostToolUse": "post-tool",
    "PostToolUseFailure": "post-tool",
    "tool.post": "post-tool",
    "SessionEnd": "session-end",
    "session.end": "session-end",
}


def phase_of(flag: str, payload: Any) -> str:
    """pre (ask before the call), post-tool, or session-end."""
    if flag in ("post-tool", "session-end"):
        return flag
    if flag == "auto" and isinstance(payload, dict):
        given = payload.get("hook_event_name") or payload.get("event")
        if isinstance(given, str):
            return _AFTER_EVENTS.get(given, "pre")
    return "pre"


def _nested(payload: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI-style `tool_call` object, or {} when the input has none."""
    nested = payload.get("tool_call")
    return nested if isinstance(nested, dict) else {}


def _call_id(payload: dict[str, Any]) -> str | None:
    nested = _nested(payload)
    return _str(
        payload.get("tool_use_id")
        or payload.get("toolUseId")
        or payload.get("tool_call_id")
        or payload.get("toolCallId")
        or nested.get("id")
    )


def after_call(payload: Any, phase: str, source: str) -> tuple[AfterFlow, str] | None:
    """The flow for a post-tool / session-end input, or None when there is nothing to do."""
    if not isinstance(payload, dict):
        raise BadInput("stdin is not a JSON object")
    if phase == "session-end":
        session = _str(payload.get("session_id") or payload.get("sessionId"))
        if session is None:
            raise BadInput("no session_id in the session-end input")
        why = _str(payload.get("reason"))
        text = f"the {source} session ended" + (f" ({why})" if why else "")
        return end_session(session, text), session
    key = _call_id(payload)
    tool = payload.get("tool_name") or payload.get("toolName") or _nested(payload).get("name")
    if key is None or not isinstance(tool, str):
        return None  # no call id: the request (if any) cannot be found again
    args = payload.get("tool_input", payload.get("toolInput"))
    response = payload.get("tool_response", payload.get("toolResponse", payload.get("result")))
    error = payload.get("error")
    if payload.get("hook_event_name") == "PostToolUseFailure" and not error:
        error = "the tool failed"
    outcome, summary = outcome_of(response, error)
    flow = report_outcome(
        key=key,
        tool_name=tool,
        outcome=outcome,
        summary=summary,
        tool_args=args if isinstance(args, dict) else None,
    )
    return flow, key


# -- answering in the agent's dialect -------------------------------------------------------


class Answer:
    """What the hook process writes and returns."""

    __slots__ = ("stdout", "exit_code", "stderr")

    def __init__(
        self, stdout: dict[str, Any] | None, exit_code: int = 0, stderr: str | None = None
    ) -> None:
        self.stdout, self.exit_code, self.stderr = stdout, exit_code, stderr


def answer_claude(verdict: Verdict, event: str, on_no_rule: str, fail_open: bool) -> Answer:
    """Claude Code: exactly one JSON object on stdout (or none: "no decision"), exit 0.

    An approval with edits carries `updatedInput` (the full edited object replaces the input)
    and, on PreToolUse, `additionalContext` telling the model what the approver changed.
    """
    decision = _decision(verdict, on_no_rule, fail_open)
    reason = clip(verdict.reason)
    edited = verdict.updated_args if decision == "allow" else None
    if decision == "defer":
        return Answer(None, 0, reason)
    if event == "PermissionRequest":
        if decision == "ask":
            return Answer(None, 0, reason)  # no decision: Claude Code shows its own prompt
        body: dict[str, Any] = {"behavior": decision}
        if decision == "deny":
            body["message"] = reason
        if edited is not None:
            body["updatedInput"] = edited
        return Answer({"hookSpecificOutput": {"hookEventName": event, "decision": body}})
    out: dict[str, Any] = {
        "hookEventName": "PreToolUse",
        "permissionDecision": decision,
        "permissionDecisionReason": reason,
    }
    if edited is not None:
        out["updatedInput"] = edited
        # An allow's reason reaches only the user; the model must learn that what ran is not
        # what it asked for, or it will reason about the wrong call.
        out["additionalContext"] = reason
    return Answer({"hookSpecificOutput": out})


def answer_command(verdict: Verdict, on_no_rule: str, fail_open: bool) -> Answer:
    """Command hooks: exit 0 allows, exit 2 blocks with the reason on stderr; JSON on stdout.

    An approval with edits adds `updatedInput` (the full edited arguments) to the JSON.
    """
    decision = _decision(verdict, on_no_rule, fail_open)
    reason = clip(verdict.reason)
    if decision in ("allow", "defer"):
        edited = verdict.updated_args if decision == "allow" else None
        if edited is not None:
            return Answer({"continue": True, "reason": reason, "updatedInput": edited}, 0)
        return Answer({"continue": True, "reason": reason}, 0)
    if decision == "ask":
        reason = clip(
            verdict.reason + " The command hook cannot ask a person locally, so it was blocked "
            "(--on-no-rule ask)."
        )
    return Answer({"continue": False, "reason": reason}, 2, reason)


def answer_codex(
    verdict: Verdict, event: str, on_no_rule: str, fail_open: bool, apply_edits: bool = False
) -> Answer:
    """Codex: only the answers Codex accepts, because it runs the call on any other.

    Codex treats `ask`, a bare `allow`, unknown fields or a malformed reply in PreToolUse as a
    failed hook and runs the call. So: deny is exit 2 with the reason on stderr (both events);
    a yes is no output in PreToolUse (Codex's own approval policy goes on) and
    `decision.behavior = "allow"` in PermissionRequest. An approval with edits is
    `allow` + `updatedInput` only with `apply_edits` (Codex 0.131 and later apply it; older
    ones would run the original arguments), else a deny that names the approved arguments.
    """
    decision = _decision(verdict, on_no_rule, fail_open)
    reason = clip(verdict.reason)
    edited = verdict.updated_args if decision == "allow" else None
    if edited is not None and not (apply_edits and event == "PreToolUse"):
        # The request's own reason: the verdict's adds "the call runs with the edits".
        approved = str((verdict.request or {}).get("reason") or "Approved with edits")
        return Answer(None, 2, clip(edits_not_applied(f"gate: {approved}", edited)))
    if decision == "ask":
        if event == "PermissionRequest":
            return Answer(None, 0, reason)  # no decision: Codex shows its own prompt
        return Answer(
            None,
            2,
            clip(
                verdict.reason + " Codex's PreToolUse hook cannot ask a person locally, so it "
                "was blocked (--on-no-rule ask)."
            ),
        )
    if decision == "deny":
        return Answer(None, 2, reason)
    if decision == "defer":
        return Answer(None, 0, reason)
    if event == "PermissionRequest":
        body = {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}
        return Answer({"hookSpecificOutput": body})
    if edited is not None:
        out = {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": edited}
        return Answer({"hookSpecificOutput": out})
    return Answer(None, 0, reason)


def _decision(verdict: Verdict, on_no_rule: str, fail_open: bool) -> str:
    if verdict.allowed:
        return "allow"
    if verdict.kind == "no_rule":
        return on_no_rule
    if fail_open and verdict.kind in GATE_DOWN:
        return "defer"
    return "deny"
