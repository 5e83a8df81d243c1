"""`gate hook`: ask gate about one tool call from an agent's pre-tool hook.

Reads the agent's hook JSON on stdin, calls `POST /v1/gate`, long-polls the request until a
person (or the rule's deadline) decides or the hook's own deadline passes, and answers in the
agent's dialect: Claude Code (`PreToolUse`, `PermissionRequest`) or the command-hook
convention (exit 0 allows, exit 2 blocks with the reason on stderr).

This module runs once per tool call, so its start-up cost is part of every tool call: it
imports the standard library only (a test holds it to that). The waiting logic is a sans-IO
generator, `decide()`, that yields HTTP exchanges and pauses; `gate hook` drives it with
urllib, and `gate.client` drives the same generator with httpx, sync or async.

Everything that is not a yes fails closed: gate unreachable, an error reply, a bad token, the
hook's deadline. `--fail-open` exists for people who prefer availability, and says so loudly.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
#: Claude Code kills a command hook after 600 s by default and then lets the call through its
#: normal permission flow; stopping 60 s earlier leaves time to withdraw the request and answer.
DEFAULT_TIMEOUT = 540.0
#: one long-poll; under the server's 60 s cap and the idle timeout of common proxies
WAIT_SLICE = 25.0
#: POST /v1/gate tries (a restart blip is survived, a dead server is reported in ~1 s)
SUBMIT_ATTEMPTS = 3
SUBMIT_TIMEOUT = 15.0
CANCEL_TIMEOUT = 3.0
#: connection lost mid-wait: retry after 0.2, 0.4, ... capped at 2 s, until the deadline
BACKOFF_FIRST, BACKOFF_CAP = 0.2, 2.0
#: a derived key that finds an earlier, finished request asks again under key#2, key#3, ...
MAX_KEY_BUMPS = 50
REASON_MAX = 4000
TOKEN_FIX = (
    'set GATE_TOKEN (or --token) to an agent token from gate.toml [[tokens]] (role = "agent")'
)
FINAL = frozenset({"approved", "rejected", "expired", "cancelled"})

# -- what the flow asks for, and what it gets -----------------------------------------------


@dataclass(frozen=True)
class Exchange:
    """One HTTP call the flow wants made; `path` is relative to the gate URL."""

    method: str
    path: str
    body: dict[str, Any] | None
    timeout: float


@dataclass(frozen=True)
class Pause:
    """The flow wants to sleep (backoff between retries)."""

    seconds: float


@dataclass(frozen=True)
class Reply:
    """The answer to an Exchange: `status` 0 when no HTTP answer arrived."""

    status: int
    body: Any = None
    problem: str | None = None


Step = Exchange | Pause
Flow = Generator[Step, Reply | None, "Verdict"]

#: kinds that let the call run
ALLOWING = frozenset({"approved", "allowed"})
#: kinds where the gate itself failed before anyone was asked (what --fail-open opens)
GATE_DOWN = frozenset({"unreachable", "error"})


@dataclass(frozen=True)
class Verdict:
    """The hook's answer: a kind and a reason written for the model.

    Kinds: approved, rejected, expired, cancelled (a request's end); allowed, denied, no_rule
    (policy); unreachable, lost, error, unauthorized, misconfigured, deadline, bad_input.
    """

    kind: str
    reason: str
    rule: str | None = None
    request: dict[str, Any] | None = None

    @property
    def allowed(self) -> bool:
        """True when the call may run (approved, or allowed by a rule)."""
        return self.kind in ALLOWING

    @property
    def request_id(self) -> str | None:
        """The id of the approval request, when one was made."""
        return str(self.request["id"]) if self.request else None


@dataclass(frozen=True)
class Call:
    """One tool call to ask gate about (the fields of `POST /v1/gate`)."""

    tool_name: str
    tool_args: dict[str, Any] = field(default_factory=dict)
    agent_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    idempotency_key: str | None = None
    summary: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    #: the key was derived from session, tool and args (no call id): a finished request under
    #: it is an earlier, identical call, so ask again under a fresh key
    derived_key: bool = False

    def body(self, key: str | None) -> dict[str, Any]:
        """The JSON body of `POST /v1/gate` (the server refuses unknown fields)."""
        body: dict[str, Any] = {
            "tool_name": self.tool_name,
            "tool_args": self.tool_args,
            "metadata": self.metadata,
            "context": self.context,
        }
        optional = {
            "agent_id": self.agent_id,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "idempotency_key": key,
            "summary": self.summary,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return body


# -- the flow -------------------------------------------------------------------------------


def decide(
    call: Call,
    *,
    url: str,
    limit: float,
    token_hint: str = TOKEN_FIX,
    wait_slice: float = WAIT_SLICE,
    clock: Callable[[], float] = time.monotonic,
) -> Flow:
    """Ask gate about `call` and wait up to `limit` seconds for the verdict (sans-IO)."""
    deadline = clock() + limit
    words = _Words(call.tool_name, url, limit, token_hint)

    # 1. submit (retried briefly: the idempotency key makes a repeated POST harmless)
    key = call.idempotency_key
    bumps = failures = 0
    while True:
        remaining = deadline - clock()
        reply = yield from _call(
            Exchange("POST", "/v1/gate", call.body(key), max(0.1, min(SUBMIT_TIMEOUT, remaining)))
        )
        if _transient(reply):
            failures += 1
            if failures < SUBMIT_ATTEMPTS and deadline - clock() > 0:
                yield Pause(min(BACKOFF_FIRST * 2 ** (failures - 1), deadline - clock()))
                continue
            if reply.status == 0:
                return Verdict("unreachable", words.unreachable(reply.problem or "no answer"))
            return Verdict("error", words.error(reply))
        if reply.status != 200:
            return _refused(reply, words)
        answer = reply.body
        decision = answer.get("decision") if isinstance(answer, dict) else None
        rule = answer.get("rule") if isinstance(answer, dict) else None
        reason = str(answer.get("reason") or "") if isinstance(answer, dict) else ""
        if decision == "allow":
            if rule is None:
                return Verdict("no_rule", words.no_rule())
            return Verdict("allowed", words.allowed(reason), rule)
        if decision == "deny":
            return Verdict("denied", words.denied(rule, reason), rule)
        request = answer.get("request") if decision == "ask" else None
        if not _is_request(request):
            return Verdict("error", words.error(Reply(200, problem="unexpected reply")))
        assert isinstance(request, dict)
        if (
            call.derived_key
            and request["status"] != "pending"
            and failures == 0
            and bumps < MAX_KEY_BUMPS
        ):
            bumps += 1
            key = f"{call.idempotency_key}#{bumps + 1}"
            continue
        break

    # 2. wait, in slices, through connection losses and restarts, until final or deadline
    request_id = str(request["id"])
    failures = 0
    problem: str | None = None
    while request["status"] == "pending":
        remaining = deadline - clock()
        if remaining <= 0:
            final = yield from _withdraw(request_id, words)
            if final is not None:
                request = final
                break
            if problem is not None:
                return Verdict("lost", words.lost(request_id, problem), rule, request)
            return Verdict("deadline", words.deadline(request_id), rule, request)
        slice_ = min(wait_slice, remaining)
        reply = yield from _call(
            Exchange(
                "GET", f"/v1/requests/{request_id}/wait?timeout={slice_:.3f}", None, slice_ + 10
            )
        )
        if reply.status == 200 and _is_request(reply.body):
            request, failures, problem = reply.body, 0, None
            continue
        if _transient(reply):
            failures += 1
            problem = reply.problem or f"HTTP {reply.status}"
            yield Pause(
                max(0.0, min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_CAP, deadline - clock()))
            )
            continue
        return _refused(reply, words)
    return _final(request, rule, words)


def _call(exchange: Exchange) -> Generator[Step, Reply | None, Reply]:
    reply = yield exchange
    assert reply is not None, "the driver must send a Reply for every Exchange"
    return reply


def _withdraw(
    request_id: str, words: _Words
) -> Generator[Step, Reply | None, dict[str, Any] | None]:
    """Cancel a request nobody waits for any more; return it if a decision beat the cancel."""
    reply = yield from _call(
        Exchange(
            "POST",
            f"/v1/requests/{request_id}/cancel",
            {"reason": words.withdrawn()},
            CANCEL_TIMEOUT,
        )
    )
    if reply.status == 200 and _is_request(reply.body) and reply.body["status"] != "cancelled":
        return dict(reply.body)
    if reply.status == 409:
        # Decided between our last poll and the cancel: that verdict stands.
        again = yield from _call(
            Exchange("GET", f"/v1/requests/{request_id}", None, CANCEL_TIMEOUT)
        )
        if again.status == 200 and _is_request(again.body) and again.body["status"] in FINAL:
            if again.body["status"] != "cancelled":
                return dict(again.body)
    return None


def _transient(reply: Reply) -> bool:
    return reply.status == 0 or reply.status in (429, 500, 502, 503, 504)


def _is_request(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("id"), str) and "status" in value


def _refused(reply: Reply, words: _Words) -> Verdict:
    if reply.status in (401, 403):
        return Verdict("unauthorized", words.unauthorized(reply))
    return Verdict("error", words.error(reply))


def _final(request: dict[str, Any], rule: str | None, words: _Words) -> Verdict:
    status = request["status"]
    reason = str(request.get("reason") or "")
    if status == "approved":
        return Verdict("approved", words.approved(reason), rule, request)
    if status == "rejected":
        return Verdict("rejected", words.rejected(reason), rule, request)
    if status == "expired":
        return Verdict("expired", words.expired(reason), rule, request)
    if status == "cancelled":
        return Verdict("cancelled", words.cancelled(reason), rule, request)
    return Verdict("error", words.error(Reply(200, problem=f"unknown status {status!r}")))


# -- words for the model ----------------------------------------------------------------------


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text[-1] in ".!?" else text + "."


def _error_text(reply: Reply) -> str:
    err = reply.body.get("error") if isinstance(reply.body, dict) else None
    if isinstance(err, dict):
        return f"HTTP {reply.status} {err.get('code')}: {err.get('message')}"
    if reply.status:
        return f"HTTP {reply.status}" + (f", {reply.problem}" if reply.problem else "")
    return reply.problem or "no answer"


@dataclass(frozen=True)
class _Words:
    """Every sentence the hook can say, distinct per outcome so the model can tell
    "a human said no" from "nobody answered" from "the gate is down"."""

    tool: str
    url: str
    limit: float
    token_hint: str

    def approved(self, reason: str) -> str:
        return f"gate: {_sentence(reason or 'Approved by a human')}"

    def rejected(self, reason: str) -> str:
        return (
            f"gate: {_sentence(reason or 'Rejected')} A person reviewed this {self.tool} call "
            "and said no, so it was not run. Do not retry it unchanged: take the comment into "
            "account, change the approach or ask the user."
        )

    def expired(self, reason: str) -> str:
        return f"gate: {_sentence(reason or 'Nobody answered before the deadline')}"

    def cancelled(self, reason: str) -> str:
        return (
            f"gate: The approval request for this {self.tool} call was withdrawn before anyone "
            f"decided ({reason or 'cancelled'}). The call was not run; no human rejected it."
        )

    def deadline(self, request_id: str) -> str:
        return (
            f"gate: Nobody decided this {self.tool} call within the hook's {self.limit:g} s "
            f"limit, so it was not run and approval request {request_id} was withdrawn. No "
            "human rejected it: ask the user whether to try again."
        )

    def withdrawn(self) -> str:
        return f"the agent's hook stopped waiting after {self.limit:g} s"

    def lost(self, request_id: str, problem: str) -> str:
        return (
            f"gate: Lost contact with the approval server at {self.url} while waiting for a "
            f"decision on request {request_id} ({problem}), and it did not come back within the "
            f"hook's {self.limit:g} s limit, so this {self.tool} call was blocked to be safe. "
            "No human rejected it: tell the user the gate server went down."
        )

    def unreachable(self, problem: str) -> str:
        return (
            f"gate: The approval server at {self.url} could not be reached ({problem}), so this "
            f"{self.tool} call was blocked to be safe. Nobody reviewed it. Tell the user the gate "
            "server is down: start it with `gate serve`, or point GATE_URL (or --url) at it."
        )

    def error(self, reply: Reply) -> str:
        return (
            f"gate: The approval server at {self.url} answered with an error "
            f"({_error_text(reply)}), so this {self.tool} call was blocked to be safe. Nobody "
            "reviewed it. Tell the user the gate server is failing."
        )

    def unauthorized(self, reply: Reply) -> str:
        what = (
            "refused the hook's credentials" if reply.status == 401 else "does not let this token"
        )
        fix = 'use a token whose role is "agent"' if reply.status == 403 else self.token_hint
        return (
            f"gate: The approval server at {self.url} {what} ({_error_text(reply)}"
            f"{'' if reply.status == 401 else ': ask for approvals'}), so this {self.tool} call "
            f"was blocked. Nobody reviewed it. Tell the user to fix the hook's configuration: "
            f"{fix}."
        )

    def allowed(self, reason: str) -> str:
        return f"gate: {_sentence(reason or 'Allowed by policy')}"

    def denied(self, rule: str | None, reason: str) -> str:
        head = "" if rule is None or rule in reason else f"Blocked by rule {rule!r}: "
        return (
            f"gate: {head}{_sentence(reason or 'Denied by policy')} This is a standing policy, "
            "not a person's decision: do not retry this call; take another approach or ask the "
            "user."
        )

    def no_rule(self) -> str:
        return f"gate: No rule covers this {self.tool} call."


# -- drivers --------------------------------------------------------------------------------


def drive(
    flow: Flow, send: Callable[[Exchange], Reply], sleep: Callable[[float], None] = time.sleep
) -> Verdict:
    """Run a flow to its verdict with a blocking `send`."""
    try:
        step = next(flow)
        while True:
            if isinstance(step, Pause):
                sleep(step.seconds)
                step = flow.send(None)
            else:
                step = flow.send(send(step))
    except StopIteration as stop:
        verdict: Verdict = stop.value
        return verdict


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
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        except (urllib.error.URLError, OSError, HTTPException) as err:
            return Reply(0, problem=_describe(err, exchange.timeout))
        try:
            return Reply(status, json.loads(raw) if raw else None)
        except ValueError:
            return Reply(status, None, problem="the reply is not JSON")

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


def derived_key(prefix: str, session_id: str | None, tool_name: str, args: Any) -> str:
    """An idempotency key for calls without an id: session + tool + canonical args."""
    canonical = json.dumps(
        [session_id, tool_name, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return f"{prefix}:{hashlib.sha256(canonical.encode()).hexdigest()[:40]}"


def summarise(tool_name: str, args: dict[str, Any]) -> str:
    """One line for approvers: the tool and its most telling argument."""
    for name in ("command", "file_path", "url", "query", "pattern", "prompt", "path"):
        value = args.get(name)
        if isinstance(value, str) and value.strip():
            text = f"{tool_name}: {value.strip().splitlines()[0]}"
            break
    else:
        text = f"{tool_name} {json.dumps(args, ensure_ascii=False, default=str)}"
    return text if len(text) <= 200 else text[:199] + "…"


_CLAUDE_CONTEXT = (
    "session_id",
    "cwd",
    "permission_mode",
    "agent_id",
    "agent_type",
    "prompt_id",
    "hook_event_name",
    "transcript_path",
)


def parse_claude(payload: Any, ns: argparse.Namespace) -> tuple[Call, str]:
    """A Claude Code PreToolUse / PermissionRequest payload -> (Call, event name)."""
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
    context["source"] = "claude-code"
    tool_use_id = _str(payload.get("tool_use_id"))
    if event == "PreToolUse" and tool_use_id:
        key, derived = tool_use_id, False
    else:
        key, derived = derived_key("cc-" + event, session, tool, args), True
    call = Call(
        tool_name=tool,
        tool_args=args,
        agent_id=ns.agent_id or "claude-code",
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


# -- answering in the agent's dialect -------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What the hook process writes and returns."""

    stdout: dict[str, Any] | None
    exit_code: int = 0
    stderr: str | None = None


def answer_claude(verdict: Verdict, event: str, on_no_rule: str, fail_open: bool) -> Answer:
    """Claude Code: exactly one JSON object on stdout (or none: "no decision"), exit 0."""
    decision = _decision(verdict, on_no_rule, fail_open)
    reason = _cut(verdict.reason)
    if decision == "defer":
        return Answer(None, 0, reason)
    if event == "PermissionRequest":
        if decision == "ask":
            return Answer(None, 0, reason)  # no decision: Claude Code shows its own prompt
        body: dict[str, Any] = {"behavior": decision}
        if decision == "deny":
            body["message"] = reason
        return Answer({"hookSpecificOutput": {"hookEventName": event, "decision": body}})
    return Answer(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": decision,
                "permissionDecisionReason": reason,
            }
        }
    )


def answer_command(verdict: Verdict, on_no_rule: str, fail_open: bool) -> Answer:
    """Command hooks: exit 0 allows, exit 2 blocks with the reason on stderr; JSON on stdout."""
    decision = _decision(verdict, on_no_rule, fail_open)
    reason = _cut(verdict.reason)
    if decision in ("allow", "defer"):
        return Answer({"continue": True, "reason": reason}, 0)
    if decision == "ask":
        reason = _cut(
            verdict.reason + " The command hook cannot ask a person locally, so it was blocked "
            "(--on-no-rule ask)."
        )
    return Answer({"continue": False, "reason": reason}, 2, reason)


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
        choices=["claude-code", "command"],
        default="claude-code",
        help="stdin/stdout dialect (default: claude-code)",
    )
    p.add_argument(
        "--event",
        choices=["auto", "pre-tool-use", "permission-request"],
        default="auto",
        help="Claude Code hook event (default: from hook_event_name in the input)",
    )
    p.add_argument("--url", help=f"gate server URL (default: $GATE_URL or {DEFAULT_URL})")
    p.add_argument("--token", help="agent token (default: $GATE_TOKEN)")
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
        help="let calls through (to the agent's own permission flow) when gate is down "
        "or errors. NOT recommended; the default fails closed",
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


def main(argv: list[str]) -> int:
    """`gate hook`: read the hook input on stdin, answer on stdout/stderr, return the exit code."""
    ns = _parser().parse_args(argv)
    if ns.fail_open:
        _warn(
            "WARNING: gate hook runs with --fail-open: when the gate server is down or errors, "
            "tool calls go through WITHOUT approval."
        )
    try:
        verdict, event = _run(ns, sys.stdin.read())
    except Exception as exc:  # fail closed on our own bugs too, never a traceback on stdout
        verdict = Verdict(
            "error", f"gate: The gate hook failed ({exc!r}), so the call was blocked."
        )
        event = "PreToolUse"
    if ns.format == "command":
        answer = answer_command(verdict, ns.on_no_rule, ns.fail_open)
    else:
        answer = answer_claude(verdict, event, ns.on_no_rule, ns.fail_open)
    if ns.fail_open and verdict.kind in GATE_DOWN:
        _warn("WARNING: gate is unavailable and --fail-open is set; NOT blocking this call.")
    if answer.stderr:
        _warn(answer.stderr)
    if answer.stdout is not None:
        sys.stdout.write(json.dumps(answer.stdout, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    return answer.exit_code


def _run(ns: argparse.Namespace, raw: str) -> tuple[Verdict, str]:
    url = (ns.url or os.environ.get("GATE_URL") or DEFAULT_URL).strip()
    token = ns.token or os.environ.get("GATE_TOKEN") or None
    limit = DEFAULT_TIMEOUT if ns.timeout is None else ns.timeout
    event = "PreToolUse"
    try:
        payload = json.loads(raw)
        if ns.format == "command":
            call = parse_command(payload, ns)
        else:
            call, event = parse_claude(payload, ns)
    except (ValueError, BadInput) as exc:
        problem = str(exc) if isinstance(exc, BadInput) else "stdin is not valid JSON"
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
    return drive(flow, urllib_sender(url, token)), event


def _warn(text: str) -> None:
    sys.stderr.write(text.rstrip() + "\n")
    sys.stderr.flush()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
