"""The client side of asking gate: submit a call, wait for the verdict, withdraw on deadline.

Sans-IO and standard library only: `decide()` is a generator that yields the HTTP exchanges
and pauses it needs and returns a `Verdict` whose reason is written for the model. `gate hook`
drives it with urllib (`drive()`), `gate.client` with httpx, sync or async, so every adapter
waits, reconnects, withdraws and words its answers the same way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
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


class Exchange:
    """One HTTP call the flow wants made; `path` is relative to the gate URL."""

    __slots__ = ("method", "path", "body", "timeout")

    def __init__(self, method: str, path: str, body: dict[str, Any] | None, timeout: float):
        self.method, self.path, self.body, self.timeout = method, path, body, timeout

    def __repr__(self) -> str:
        return f"Exchange({self.method} {self.path}, timeout={self.timeout:g})"


class Pause:
    """The flow wants to sleep (backoff between retries)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Reply:
    """The answer to an Exchange: `status` 0 when no HTTP answer arrived."""

    __slots__ = ("status", "body", "problem")

    def __init__(self, status: int, body: Any = None, problem: str | None = None) -> None:
        self.status, self.body, self.problem = status, body, problem

    def __repr__(self) -> str:
        return f"Reply({self.status}, problem={self.problem!r})"


Step = Exchange | Pause
Flow = Generator[Step, Reply | None, "Verdict"]

#: kinds that let the call run
ALLOWING = frozenset({"approved", "allowed"})
#: kinds where the gate itself failed before anyone was asked (what --fail-open opens)
GATE_DOWN = frozenset({"unreachable", "error"})


class Verdict:
    """The hook's answer: a kind and a reason written for the model.

    Kinds: approved, rejected, expired, cancelled (a request's end); allowed, denied, no_rule
    (policy); unreachable, lost, error, unauthorized, misconfigured, deadline, bad_input.
    """

    __slots__ = ("kind", "reason", "rule", "request")

    def __init__(
        self,
        kind: str,
        reason: str,
        rule: str | None = None,
        request: dict[str, Any] | None = None,
    ) -> None:
        self.kind, self.reason, self.rule, self.request = kind, reason, rule, request

    def __repr__(self) -> str:
        return f"Verdict({self.kind!r}, {self.reason!r}, rule={self.rule!r})"

    @property
    def allowed(self) -> bool:
        """True when the call may run (approved, or allowed by a rule)."""
        return self.kind in ALLOWING

    @property
    def request_id(self) -> str | None:
        """The id of the approval request, when one was made."""
        return str(self.request["id"]) if self.request else None


class Call:
    """One tool call to ask gate about (the fields of `POST /v1/gate`).

    `derived_key`: the key was derived from session, tool and args (there was no call id), so
    a finished request under it is an earlier, identical call: ask again under a fresh key.
    """

    def __init__(
        self,
        tool_name: str,
        tool_args: dict[str, Any] | None = None,
        *,
        agent_id: str | None = None,
        user_id: str | None = None,
        session_id: str | None = None,
        idempotency_key: str | None = None,
        summary: str | None = None,
        metadata: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
        derived_key: bool = False,
    ) -> None:
        self.tool_name = tool_name
        self.tool_args = tool_args if tool_args is not None else {}
        self.agent_id = agent_id
        self.user_id = user_id
        self.session_id = session_id
        self.idempotency_key = idempotency_key
        self.summary = summary
        self.metadata = metadata if metadata is not None else {}
        self.context = context if context is not None else {}
        self.derived_key = derived_key

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


class _Words:
    """Every sentence the hook can say, distinct per outcome so the model can tell
    "a human said no" from "nobody answered" from "the gate is down"."""

    def __init__(self, tool: str, url: str, limit: float, token_hint: str) -> None:
        self.tool, self.url, self.limit, self.token_hint = tool, url, limit, token_hint

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


# -- helpers for adapters -------------------------------------------------------------------


def derived_key(prefix: str, session_id: str | None, tool_name: str, args: Any) -> str:
    """An idempotency key for calls without an id: session + tool + canonical args."""
    canonical = json.dumps(
        [session_id, tool_name, args], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    import hashlib  # only calls without an id need it

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
