"""`gate hook`: ask gate about one tool call from an agent's pre-tool hook.

Reads the agent's hook JSON on stdin, calls `POST /v1/gate`, long-polls the request until a
person (or the rule's deadline) decides or the hook's own deadline passes, and answers in the
agent's dialect: Claude Code (`PreToolUse`, `PermissionRequest`), Codex (the same two events,
answered only in the shapes Codex accepts) or the command-hook convention (exit 0 allows,
exit 2 blocks with the reason on stderr).

This module runs once per tool call, so its start-up cost is part of every tool call: it
imports the standard library only (a test holds it to that). The waiting itself is
`gate.protocol.decide()`, driven here with urllib.

Everything that is not a yes fails closed: gate unreachable, an error reply, a bad token, the
hook's deadline, an approval that is not bound to this exact call. `--fail-open` exists for
people who prefer availability, says so loudly, and covers only a gate that cannot be reached
before anyone was asked: a 5xx or an answer that is not gate's is a deny regardless. An
approver's edited arguments reach the agent as `updatedInput`.

A hook that is stopped (SIGTERM, SIGINT, SIGHUP: Claude Code kills a hook that outlives its
`timeout` with SIGTERM, then runs the call through its own permissions) withdraws its request
first, so nobody can approve it after the fact; the request also carries the hook's deadline
(`expires_in`), so approvers never see more time than the hook will wait.

Two more events run after the call and never block: `--event post-tool` records whether an
approved call ran (Claude Code PostToolUse / PostToolUseFailure), `--event session-end`
withdraws the pending requests of a session that ended (Claude Code SessionEnd). Both print
nothing on stdout and exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from http.client import HTTPException

from gate.protocol import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    GATE_DOWN,
    REASON_MAX,
    TOKEN_FIX,
    Abandoned,
    Call,
    Exchange,
    Reply,
    Report,
    Verdict,
    decide,
    derived_key,
    drive,
    end_session,
    outcome_of,
    report_outcome,
    summarise,
)
from gate.wording import edits_not_applied

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")
    R = TypeVar("R")

# -- talking HTTP with the standard library --------------------------------------------------


def urllib_sender(url: str, token: str | None) -> Callable[[Exchange], Reply]:
    """A blocking `send` for `drive()` built on urllib (standard library only)."""
    base = url.rstrip("/")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"

    def send(exchange: Exchange) -> Reply:
        data = None if exchange.body is None else json.dumps(exchange.body).encode()
        req = urllib.request.Request(
            base + exchange.path, data=data, method=exchange.method, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=exchange.timeout) as resp:
                status, raw = resp.status, resp.read()
                ctype = resp.headers.get_content_type()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
            ctype = err.headers.get_content_type() if err.headers else "no content type"
        except (urllib.error.URLError, OSError, HTTPException) as err:
            return Reply(0, problem=_describe(err, exchange.timeout))
        try:
            return Reply(status, json.loads(raw) if raw else None)
        except ValueError:
            # Say what came back, not what it said: the text is for the model to read.
            return Reply(
                status, None, problem=f"the reply is not JSON ({ctype[:60]}, {len(raw)} bytes)"
            )

    return send


def _describe(err: BaseException, timeout: float) -> str:
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return str(reason) or type(reason).__name__


# -- reading the agent's input ------------------------------------------------------------------


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
    event = _event(ns.event, payload.get("hook_event_name"))
    session = _str(payload.get("session_id"))
    context = {k: payload[k] for k in _CLAUDE_CONTEXT if payload.get(k) is not None}
    context["source"] = source
    tool_use_id = _str(payload.get("tool_use_id"))
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
    )
    return call, event


def parse_command(payload: Any, ns: argparse.Namespace) -> Call:
    """A command-hook payload (`tool_name`/`tool_input`, `toolName`/`toolInput`, or
    `tool_call.name`/`tool_call.arguments`) -> Call."""
    if not isinstance(payload, dict):
        raise BadInput("stdin is not a JSON object")
    nested = payload.get("tool_call") if isinstance(payload.get("tool_call"), dict) else {}
    assert isinstance(nested, dict)
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
    call_id = _str(
        payload.get("tool_use_id")
        or payload.get("toolUseId")
        or payload.get("tool_call_id")
        or payload.get("toolCallId")
        or nested.get("id")
    )
    context: dict[str, Any] = {"source": "command"}
    for name in ("event", "hook_event_name", "cwd", "session_id", "sessionId"):
        if payload.get(name) is not None:
            context[name] = payload[name]
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
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _event(flag: str, given: Any) -> str:
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


def _phase(flag: str, payload: Any) -> str:
    """pre (ask before the call), post-tool, or session-end."""
    if flag in ("post-tool", "session-end"):
        return flag
    if flag == "auto" and isinstance(payload, dict):
        given = payload.get("hook_event_name") or payload.get("event")
        if isinstance(given, str):
            return _AFTER_EVENTS.get(given, "pre")
    return "pre"


def _call_id(payload: dict[str, Any]) -> str | None:
    nested = payload.get("tool_call") if isinstance(payload.get("tool_call"), dict) else {}
    assert isinstance(nested, dict)
    return _str(
        payload.get("tool_use_id")
        or payload.get("toolUseId")
        or payload.get("tool_call_id")
        or payload.get("toolCallId")
        or nested.get("id")
    )


def after_call(payload: Any, phase: str, source: str) -> tuple[Any, str] | None:
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
    nested = payload.get("tool_call") if isinstance(payload.get("tool_call"), dict) else {}
    assert isinstance(nested, dict)
    tool = payload.get("tool_name") or payload.get("toolName") or nested.get("name")
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
    reason = _cut(verdict.reason)
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
    reason = _cut(verdict.reason)
    if decision in ("allow", "defer"):
        edited = verdict.updated_args if decision == "allow" else None
        if edited is not None:
            return Answer({"continue": True, "reason": reason, "updatedInput": edited}, 0)
        return Answer({"continue": True, "reason": reason}, 0)
    if decision == "ask":
        reason = _cut(
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
    reason = _cut(verdict.reason)
    edited = verdict.updated_args if decision == "allow" else None
    if edited is not None and not (apply_edits and event == "PreToolUse"):
        # The request's own reason: the verdict's adds "the call runs with the edits".
        approved = str((verdict.request or {}).get("reason") or "Approved with edits")
        return Answer(None, 2, _cut(edits_not_applied(f"gate: {approved}", edited)))
    if decision == "ask":
        if event == "PermissionRequest":
            return Answer(None, 0, reason)  # no decision: Codex shows its own prompt
        return Answer(
            None,
            2,
            _cut(
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


def _cut(text: str) -> str:
    # Claude Code caps hook output strings at 10,000 characters; stay well inside it.
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


# -- the command ----------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gate hook",
        description="Ask gate whether a tool call may run; answer in the agent's hook dialect.",
    )
    p.add_argument(
        "--format",
        choices=["claude-code", "codex", "command"],
        default="claude-code",
        help="stdin/stdout dialect (default: claude-code)",
    )
    p.add_argument(
        "--event",
        choices=["auto", "pre-tool-use", "permission-request", "post-tool", "session-end"],
        default="auto",
        help="hook event (default: from hook_event_name in the input). post-tool records "
        "whether an approved call ran; session-end withdraws the session's pending requests",
    )
    p.add_argument("--url", help=f"gate server URL (default: $GATE_URL or {DEFAULT_URL})")
    p.add_argument("--token", help="agent token (default: the variable --token-env names)")
    p.add_argument(
        "--token-env",
        default="GATE_TOKEN",
        metavar="NAME",
        help="environment variable holding the agent token (default: GATE_TOKEN)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help=f"seconds to wait for a decision before denying (default: {DEFAULT_TIMEOUT:g}; keep "
        "it below the agent's own hook timeout, which Claude Code defaults to 600)",
    )
    p.add_argument(
        "--on-no-rule",
        choices=["defer", "allow", "ask", "deny"],
        default="defer",
        help="when no rule matches: defer to the agent's own permissions (default), allow, "
        "ask the local user, or deny",
    )
    p.add_argument(
        "--fail-open",
        action="store_true",
        help="let calls through (to the agent's own permission flow) when the gate server "
        "cannot be reached before anyone was asked. NOT recommended; the default fails closed. "
        "A server that errors or answers garbage is a deny even with this flag",
    )
    p.add_argument(
        "--apply-edits",
        action="store_true",
        help="codex: answer an approval with edits as allow + updatedInput (Codex 0.131 and "
        "later apply it; older ones would run the original arguments, so by default the hook "
        "denies and names the approved arguments)",
    )
    p.add_argument("--agent-id", default=os.environ.get("GATE_AGENT_ID"), help="$GATE_AGENT_ID")
    p.add_argument("--user-id", default=os.environ.get("GATE_USER_ID"), help="$GATE_USER_ID")
    p.add_argument(
        "--metadata",
        action="append",
        default=[],
        type=_pair,
        metavar="KEY=VALUE",
        help="metadata for policy `when` expressions (repeatable)",
    )
    return p


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


class _Stop:
    """SIGTERM / SIGINT / SIGHUP: stop waiting, withdraw the request, answer, exit.

    The handler raises `Abandoned` only while the hook blocks in HTTP or a pause (`io()`), so
    it lands where the flow can withdraw; at any other moment it leaves the reason for
    `drive()` to pick up before the next step. One signal is enough: later ones are ignored
    while the (short, bounded) withdrawal runs.
    """

    def __init__(self) -> None:
        self.why: str | None = None
        self.armed = False

    def install(self) -> None:
        import signal

        for name in ("SIGTERM", "SIGINT", "SIGHUP"):
            number = getattr(signal, name, None)
            if number is not None:
                try:
                    signal.signal(number, self._on_signal)
                except ValueError:  # not the main thread: nothing to catch signals with
                    return

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.why is not None:
            return
        import signal

        self.why = signal.Signals(signum).name
        if self.armed:
            self.armed = False
            raise Abandoned(self.why)

    def stopped(self) -> str | None:
        """The signal that asked the hook to stop, if one did."""
        return self.why

    def io(self, blocking: Callable[[T], R]) -> Callable[[T], R]:
        """`blocking`, interruptible by a stop signal."""

        def run(arg: T) -> R:
            self.armed = self.why is None
            try:
                return blocking(arg)
            finally:
                self.armed = False

        return run


def main(argv: list[str]) -> int:
    """`gate hook`: read the hook input on stdin, answer on stdout/stderr, return the exit code."""
    ns = _parser().parse_args(argv)
    stop = _Stop()
    stop.install()
    if ns.fail_open and ns.format != "codex":  # Codex reads stderr as the reason of a deny
        _warn(
            "WARNING: gate hook runs with --fail-open: when the gate server cannot be reached, "
            "tool calls go through WITHOUT approval."
        )
    try:
        payload: Any = json.loads(sys.stdin.read())
    except ValueError:
        payload = _UNREADABLE
    phase = _phase(ns.event, payload)
    if phase != "pre":
        return _after_main(ns, payload, phase)
    try:
        verdict, event = _run(ns, payload, stop)
    except Abandoned as stopped:  # a signal before or after the flow ran
        verdict = Verdict(
            "abandoned",
            f"gate: The hook was stopped ({stopped.why}), so gate did not let the call through.",
        )
        event = _event(ns.event, None)
    except Exception as exc:  # fail closed on our own bugs too, never a traceback on stdout
        verdict = Verdict(
            "error", f"gate: The gate hook failed ({exc!r}), so the call was blocked."
        )
        event = "PreToolUse"
    if ns.format == "command":
        answer = answer_command(verdict, ns.on_no_rule, ns.fail_open)
    elif ns.format == "codex":
        answer = answer_codex(verdict, event, ns.on_no_rule, ns.fail_open, ns.apply_edits)
    else:
        answer = answer_claude(verdict, event, ns.on_no_rule, ns.fail_open)
    if ns.fail_open and verdict.kind in GATE_DOWN:
        _warn("WARNING: gate is unreachable and --fail-open is set; NOT blocking this call.")
    if answer.stderr:
        _warn(answer.stderr)
    if answer.stdout is not None:
        sys.stdout.write(json.dumps(answer.stdout, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    return answer.exit_code


def _after_main(ns: argparse.Namespace, payload: Any, phase: str) -> int:
    """post-tool / session-end: tell gate, print nothing, never block (exit 0)."""
    url = (ns.url or os.environ.get("GATE_URL") or DEFAULT_URL).strip()
    token = ns.token or os.environ.get(ns.token_env) or None
    source = {"claude-code": "Claude Code", "codex": "Codex"}.get(ns.format, "agent")
    try:
        if payload is _UNREADABLE:
            raise BadInput("stdin is not valid JSON")
        found = after_call(payload, phase, source)
        if found is None:
            return 0
        flow, _ = found
        report: Report = drive(flow, urllib_sender(url, token))
    except Exception as exc:  # an audit side-channel: report it, never break the agent
        _warn(f"gate hook --event {phase}: {exc}")
        return 0
    if report.kind == "failed":
        _warn(f"gate hook --event {phase}: {report.text}")
    return 0


#: stands for "stdin was not JSON" (None would be the JSON `null`)
_UNREADABLE = object()


def _run(ns: argparse.Namespace, payload: Any, stop: _Stop) -> tuple[Verdict, str]:
    url = (ns.url or os.environ.get("GATE_URL") or DEFAULT_URL).strip()
    token = ns.token or os.environ.get(ns.token_env) or None
    limit = DEFAULT_TIMEOUT if ns.timeout is None else ns.timeout
    event = "PreToolUse"
    try:
        if payload is _UNREADABLE:
            raise BadInput("stdin is not valid JSON")
        if ns.format == "command":
            call = parse_command(payload, ns)
        else:
            call, event = parse_claude(payload, ns, ns.format)
    except (ValueError, BadInput) as exc:
        problem = str(exc) if isinstance(exc, BadInput) else f"bad input: {exc}"
        return (
            Verdict(
                "bad_input",
                f"gate: The hook could not read its input ({problem}), so the call was blocked "
                "to be safe. Nobody reviewed it.",
            ),
            _event(ns.event, None),
        )
    if not url.startswith(("http://", "https://")):
        return (
            Verdict(
                "misconfigured",
                f"gate: The gate URL {url!r} is not an http(s) URL, so this {call.tool_name} call "
                "was blocked. Tell the user to set GATE_URL (or --url), e.g. "
                f"{DEFAULT_URL}.",
            ),
            event,
        )
    hint = TOKEN_FIX if token else "no token was sent: " + TOKEN_FIX
    flow = decide(call, url=url, limit=max(0.0, limit), token_hint=hint)
    send = stop.io(urllib_sender(url, token))
    return drive(flow, send, stop.io(time.sleep), stop.stopped), event


def _warn(text: str) -> None:
    sys.stderr.write(text.rstrip() + "\n")
    sys.stderr.flush()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
