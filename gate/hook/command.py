"""`gate hook`: ask gate about one tool call from an agent's pre-tool hook.

Reads the agent's hook JSON on stdin, calls `POST /v1/gate`, long-polls the request until a
person (or the rule's deadline) decides or the hook's own deadline passes, and answers in the
agent's dialect: Claude Code (`PreToolUse`, `PermissionRequest`), Codex (the same two events,
answered only in the shapes Codex accepts) or the command-hook convention (exit 0 allows,
exit 2 blocks with the reason on stderr).

This module runs once per tool call, so its start-up cost is part of every tool call: it
imports the standard library only (a test holds it to that). The waiting itself is
`gate.asking.askflow.decide()`, driven here with urllib; what each agent runtime sends and accepts
is `gate.hook.dialects`.

Everything that is not a yes fails closed: gate unreachable, an error reply, a bad token, the
hook's deadline, an approval that is not bound to this exact call. `--fail-open` exists for
people who prefer availability, says so loudly, and covers only a gate that cannot be reached
before anyone was asked: a 5xx or an answer that is not gate's is a deny regardless. An
approver's edited arguments reach the agent as `updatedInput`.

A hook that is stopped (SIGTERM, SIGINT, SIGHUP: Claude Code kills a hook that outlives its
`timeout` with SIGTERM, then runs the call through its own permissions) withdraws its request
first, so nobody can approve it after the fact; the request also carries the hook's deadline
(`expires_in`), so approvers never see more time than the hook will wait. Stopped at any
point, it answers with a deny in the agent's dialect (Codex runs a call whose hook died
without one): `gate.cli` catches the signals before the hook's imports (`gate.hook.start`),
and a stop before or while stdin is read answers at once, without waiting for the input.

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

from gate.asking import tracecontext
from gate.asking.askflow import DEFAULT_TIMEOUT, DEFAULT_URL, decide
from gate.asking.exchange import Abandoned, Exchange, Reply, drive, retry_after_of
from gate.asking.toolcall import GATE_DOWN, Verdict
from gate.asking.wording import TOKEN_FIX
from gate.hook.dialects import (
    BadInput,
    after_call,
    answer_claude,
    answer_codex,
    answer_command,
    event_name,
    parse_claude,
    parse_command,
    phase_of,
)

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
    headers.update(tracecontext.headers())  # the agent's TRACEPARENT: gate's spans join it

    def send(exchange: Exchange) -> Reply:
        data = None if exchange.body is None else json.dumps(exchange.body).encode()
        req = urllib.request.Request(
            base + exchange.path, data=data, method=exchange.method, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=exchange.timeout) as resp:
                status, raw = resp.status, resp.read()
                ctype = resp.headers.get_content_type()
                retry = retry_after_of(resp.headers.get("Retry-After"))
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
            ctype = err.headers.get_content_type() if err.headers else "no content type"
            retry = retry_after_of(err.headers.get("Retry-After") if err.headers else None)
        except (urllib.error.URLError, OSError, HTTPException) as err:
            return Reply(0, problem=_describe(err, exchange.timeout))
        try:
            return Reply(status, json.loads(raw) if raw else None, retry_after=retry)
        except (ValueError, RecursionError):  # not JSON, or nested too deeply to parse
            # Say what came back, not what it said: the text is for the model to read.
            problem = f"the reply is not JSON ({ctype[:60]}, {len(raw)} bytes)"
            return Reply(status, None, problem=problem, retry_after=retry)

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
    _add_answer_options(p)
    p.add_argument("--agent-id", default=os.environ.get("GATE_AGENT_ID"), help="$GATE_AGENT_ID")
    p.add_argument("--user-id", default=os.environ.get("GATE_USER_ID"), help="$GATE_USER_ID")
    add_metadata_option(p)
    return p


def add_metadata_option(p: argparse.ArgumentParser) -> None:
    """`--metadata KEY=VALUE` (repeatable): facts for policy (`gate hook`, `gate mcp`)."""
    p.add_argument(
        "--metadata",
        action="append",
        default=[],
        type=_pair,
        metavar="KEY=VALUE",
        help="metadata for policy `when` expressions (repeatable)",
    )


def _add_answer_options(p: argparse.ArgumentParser) -> None:
    """How long to wait and what to answer when no person (or no rule) decides."""
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
        """Take the stop signals over, with one `gate.hook.start` caught while starting."""
        import signal

        from gate.hook.start import STOP_SIGNALS, caught

        for name in STOP_SIGNALS:
            number = getattr(signal, name, None)
            if number is not None:
                try:
                    signal.signal(number, self._on_signal)
                except ValueError:  # not the main thread: nothing to catch signals with
                    return
        early = caught()
        if early is not None and self.why is None:
            self.why = signal.Signals(early).name

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
    payload = _read_input(stop)
    phase = phase_of(ns.event, None if payload is _STOPPED else payload)
    if phase != "pre":
        return 0 if payload is _STOPPED else _after_main(ns, payload, phase)
    try:
        if payload is _STOPPED:
            raise Abandoned(stop.stopped() or "stopped")
        verdict, event = _run(ns, payload, stop)
    except Abandoned as stopped:  # a signal before or after the flow ran
        verdict = Verdict(
            "abandoned",
            f"gate: The hook was stopped ({stopped.why}), so gate did not let the call through.",
        )
        event = event_name(ns.event, None)
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
        report = drive(flow, urllib_sender(url, token))
    except Exception as exc:  # an audit side-channel: report it, never break the agent
        _warn(f"gate hook --event {phase}: {exc}")
        return 0
    if report.kind == "failed":
        _warn(f"gate hook --event {phase}: {report.text}")
    return 0


#: stands for "stdin was not JSON" (None would be the JSON `null`)
_UNREADABLE = object()
#: stands for "stopped before the input was read"
_STOPPED = object()


def _read_input(stop: _Stop) -> Any:
    """The hook's JSON input; `_STOPPED` when a stop signal came first or while waiting for
    it (an agent that stops its hook may never close stdin)."""
    if stop.stopped() is not None:
        return _STOPPED
    try:
        text = stop.io(_read_stdin)(stop)
    except Abandoned:
        return _STOPPED
    try:
        return json.loads(text)
    except ValueError:
        return _UNREADABLE


def _read_stdin(stop: _Stop) -> str:
    """stdin, read whole once the stop handler is armed: a signal that came between the
    caller's look and the arming (it set the reason without interrupting) is seen here,
    before a read that might never return (an agent may never close stdin)."""
    why = stop.stopped()
    if why is not None:
        raise Abandoned(why)
    return sys.stdin.read()


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
            event_name(ns.event, None),
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
