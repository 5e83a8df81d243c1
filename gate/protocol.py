"""The client side of asking gate: submit a call, wait for the verdict, withdraw on deadline.

Sans-IO and standard library only: `decide()` is a generator that yields the HTTP exchanges
and pauses it needs and returns a `Verdict` whose reason is written for the model. `gate hook`
drives it with urllib (`drive()`), `gate.client` with httpx, sync or async, so every adapter
waits, reconnects, withdraws and words its answers the same way.

A yes is checked before it is trusted: the verdict's `args_hash` must equal
`gate.binding.call_hash` over what will actually run (the approver's edited arguments, else
the call's own) and the idempotency key that was sent, or the call is refused.

After the call, `report_outcome()` records whether it ran (`POST /v1/requests/{id}/outcome`),
and `end_session()` withdraws a finished session's pending requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator

from gate.wording import Words, error_text

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

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
#: post-tool and session-end calls: the agent has moved on, a slow gate must not hold it
AFTER_TIMEOUT = 5.0
#: an outcome summary is a glance at the result for the audit trail, not the result itself
OUTCOME_SUMMARY_MAX = 300
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
ALLOWING = frozenset({"approved", "allowed", "granted"})
#: kinds where the gate itself failed before anyone was asked (what --fail-open opens)
GATE_DOWN = frozenset({"unreachable", "error"})


class Verdict:
    """The hook's answer: a kind and a reason written for the model.

    Kinds: approved, rejected, expired, cancelled (a request's end); allowed, denied, no_rule
    (policy); granted (a time-boxed grant let it through); mismatch (the approval is not bound
    to this call), reused (the call id was used for another call); unreachable, lost, error,
    unauthorized, misconfigured, deadline, bad_input.
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

    @property
    def updated_args(self) -> dict[str, Any] | None:
        """The full argument object to run with when an approver edited it; None: as asked."""
        edited = self.request.get("approved_args") if self.allowed and self.request else None
        return dict(edited) if isinstance(edited, dict) else None


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
    words = Words(call.tool_name, url, limit, token_hint)

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
        if reply.status == 409 and _error_code(reply) == "idempotency_key_reused":
            return Verdict("reused", words.reused(key))
        if reply.status != 200:
            return _refused(reply, words)
        answer = reply.body
        decision = answer.get("decision") if isinstance(answer, dict) else None
        rule = answer.get("rule") if isinstance(answer, dict) else None
        reason = str(answer.get("reason") or "") if isinstance(answer, dict) else ""
        if decision == "allow":
            if rule is None:
                return Verdict("no_rule", words.no_rule())
            granted = answer.get("request")
            if _is_request(granted):
                # A grant let it through: a request born approved, bound like any approval.
                assert isinstance(granted, dict)
                verdict = Verdict("granted", words.allowed(reason), rule, granted)
                return _bound(verdict, call, key, words)
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
    return _bound(_final(request, rule, words), call, key, words)


def _call(exchange: Exchange) -> Generator[Step, Reply | None, Reply]:
    reply = yield exchange
    assert reply is not None, "the driver must send a Reply for every Exchange"
    return reply


def _withdraw(
    request_id: str, words: Words
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


def _bound(verdict: Verdict, call: Call, key: str | None, words: Words) -> Verdict:
    """Let a yes through only if it was given for exactly this call (see gate.binding)."""
    if not verdict.allowed or verdict.request is None:
        return verdict
    from gate.binding import call_hash  # only calls a person (or a grant) decided need it

    edited = verdict.updated_args
    runs = edited if edited is not None else call.tool_args
    expected = call_hash(call.tool_name, runs, key)
    got = verdict.request.get("args_hash")
    if got == expected:
        return verdict
    return Verdict(
        "mismatch",
        words.mismatch(str(verdict.request["id"]), got, expected),
        verdict.rule,
        verdict.request,
    )


def _error_code(reply: Reply) -> str | None:
    err = reply.body.get("error") if isinstance(reply.body, dict) else None
    return str(err.get("code")) if isinstance(err, dict) else None


def _transient(reply: Reply) -> bool:
    return reply.status == 0 or reply.status in (429, 500, 502, 503, 504)


def _is_request(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("id"), str) and "status" in value


def _refused(reply: Reply, words: Words) -> Verdict:
    if reply.status in (401, 403):
        return Verdict("unauthorized", words.unauthorized(reply))
    return Verdict("error", words.error(reply))


def _final(request: dict[str, Any], rule: str | None, words: Words) -> Verdict:
    status = request["status"]
    reason = str(request.get("reason") or "")
    if status == "approved":
        edited = isinstance(request.get("approved_args"), dict)
        return Verdict("approved", words.approved(reason, edited), rule, request)
    if status == "rejected":
        return Verdict("rejected", words.rejected(reason), rule, request)
    if status == "expired":
        return Verdict("expired", words.expired(reason), rule, request)
    if status == "cancelled":
        return Verdict("cancelled", words.cancelled(reason), rule, request)
    return Verdict("error", words.error(Reply(200, problem=f"unknown status {status!r}")))


def drive(
    flow: Generator[Step, Reply | None, T],
    send: Callable[[Exchange], Reply],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run a flow to its result (a Verdict, or a Report) with a blocking `send`."""
    try:
        step = next(flow)
        while True:
            if isinstance(step, Pause):
                sleep(step.seconds)
                step = flow.send(None)
            else:
                step = flow.send(send(step))
    except StopIteration as stop:
        result: T = stop.value
        return result


# -- after the call: outcome and session end ------------------------------------------------


class Report:
    """What a post-tool or session-end call did.

    Kinds: recorded, cancelled (done); ungated (no request for this call), skipped (nothing to
    record); failed (the gate could not be told: `text` says why).
    """

    __slots__ = ("kind", "text", "request_ids")

    def __init__(self, kind: str, text: str, request_ids: list[str] | None = None) -> None:
        self.kind, self.text = kind, text
        self.request_ids = request_ids if request_ids is not None else []

    def __repr__(self) -> str:
        return f"Report({self.kind!r}, {self.text!r})"


def report_outcome(
    *,
    key: str,
    tool_name: str,
    outcome: str,
    summary: str | None,
    tool_args: dict[str, Any] | None = None,
) -> Generator[Step, Reply | None, Report]:
    """Record what came of the call made under idempotency `key` (sans-IO).

    A call no request was made for (un-gated, or allowed by policy) is not an error: there is
    nothing to record. `tool_args`, when given, is what actually ran; if it is not what was
    approved, the summary says so.
    """
    from urllib.parse import quote

    found = yield from _after(
        Exchange(
            "GET",
            f"/v1/requests?idempotency_key={quote(key, safe='')}&limit=1",
            None,
            AFTER_TIMEOUT,
        )
    )
    items = found.body.get("items") if isinstance(found.body, dict) else None
    if found.status != 200 or not isinstance(items, list):
        return Report("failed", f"could not look up the request for {key!r}: {error_text(found)}")
    if not items or not _is_request(items[0]) or items[0].get("tool_name") != tool_name:
        return Report("ungated", f"no approval request was made for {tool_name} call {key!r}")
    request = items[0]
    request_id = str(request["id"])
    if request["status"] != "approved":
        return Report("skipped", f"request {request_id} is {request['status']}: nothing ran")
    if request.get("outcome"):
        return Report("skipped", f"request {request_id} already has outcome {request['outcome']}")
    if tool_args is not None:
        from gate.binding import call_hash

        if call_hash(tool_name, tool_args, key) != request.get("args_hash"):
            note = "ran with arguments other than the approved ones"
            summary = f"{note}: {summary}" if summary else note
    reply = yield from _after(
        Exchange(
            "POST",
            f"/v1/requests/{request_id}/outcome",
            {"outcome": outcome, "summary": summary},
            AFTER_TIMEOUT,
        )
    )
    if reply.status == 200:
        return Report("recorded", f"request {request_id}: {outcome}", [request_id])
    if reply.status == 409:
        return Report("skipped", f"request {request_id}: {error_text(reply)}", [request_id])
    return Report("failed", f"request {request_id}: {error_text(reply)}", [request_id])


def end_session(session_id: str, why: str) -> Generator[Step, Reply | None, Report]:
    """Withdraw every pending request of an agent session that ended (sans-IO)."""
    from urllib.parse import quote

    reply = yield from _after(
        Exchange(
            "POST",
            f"/v1/sessions/{quote(session_id, safe='')}/cancel",
            {"reason": why},
            AFTER_TIMEOUT,
        )
    )
    ids = reply.body.get("cancelled") if isinstance(reply.body, dict) else None
    if reply.status != 200 or not isinstance(ids, list):
        return Report("failed", f"could not cancel session {session_id!r}: {error_text(reply)}")
    ids = [str(i) for i in ids]
    return Report("cancelled", f"cancelled {len(ids)} pending request(s)", ids)


def _after(exchange: Exchange) -> Generator[Step, Reply | None, Reply]:
    """One call, tried twice: a restart blip should not lose an audit record."""
    reply = yield from _call(exchange)
    if _transient(reply):
        yield Pause(BACKOFF_FIRST)
        reply = yield from _call(exchange)
    return reply


def outcome_of(tool_response: Any, error: Any = None) -> tuple[str, str | None]:
    """("ran" | "failed", a short summary) from an agent's tool response or error."""
    failed = error is not None and error is not False and error != ""
    if isinstance(tool_response, dict):
        failed = failed or bool(
            tool_response.get("is_error")
            or tool_response.get("isError")
            or tool_response.get("error")
            or tool_response.get("success") is False
        )
    text = _glance(error if failed and error else tool_response)
    return ("failed" if failed else "ran"), text


def _glance(value: Any) -> str | None:
    if value is None or value == "" or value == {}:
        return None
    if isinstance(value, dict) and ("stdout" in value or "stderr" in value):
        parts = [str(value.get(k) or "").strip() for k in ("stdout", "stderr")]
        text = " | ".join(p for p in parts if p) or "(no output)"
    elif isinstance(value, str):
        text = value.strip()
    else:
        text = json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    if len(text) > OUTCOME_SUMMARY_MAX:
        text = text[: OUTCOME_SUMMARY_MAX - 1] + "…"
    return text or None


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
