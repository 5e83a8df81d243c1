"""The client side of asking gate: submit a call, wait for the verdict, withdraw on deadline.

Sans-IO and standard library only: `decide()` is a generator that yields the HTTP exchanges
and pauses it needs and returns a `Verdict` whose reason is written for the model. `gate hook`
drives it with urllib (`drive()`), `gate.client` with httpx, sync or async, so every adapter
waits, reconnects, withdraws and words its answers the same way.

A yes is checked before it is trusted: the verdict's `args_hash` must equal
`gate.binding.call_hash` over what will actually run (the approver's edited arguments, else
the call's own) and the idempotency key that was sent, or the call is refused.

The request never outlives its asker: the POST carries `expires_in` (a little less than the
time the caller will wait), and a caller that stops early (a signal, a cancelled task,
Ctrl-C) throws `Abandoned` into the flow, which then withdraws the request, or the one its
in-flight POST may have created, before it returns. `drive()` does that throwing for
blocking drivers.

Only "the gate could not be reached before anyone was asked" is a `GATE_DOWN` verdict (what
`--fail-open` opens). A server that answers 5xx, or answers something that is not a gate
answer, is a deny with its own wording, however it is configured.

After the call, `report_outcome()` records whether it ran (`POST /v1/requests/{id}/outcome`),
and `end_session()` withdraws a finished session's pending requests.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator

from gate.wording import Words

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
#: withdrawing is the last thing a stopping caller does: short, so a kill that follows its
#: SIGTERM a few seconds later still finds it done
CANCEL_TIMEOUT = 3.0
#: the request expires this long before the caller gives up: the server's expiry sweep (1 s
#: by default) then ends it before the caller has to withdraw it
EXPIRY_MARGIN = 2.0
#: the largest `expires_in` the server accepts (gate.schemas.EXPIRES_IN_MAX)
EXPIRES_IN_MAX = 30 * 24 * 3600.0
#: post-tool and session-end calls: the agent has moved on, a slow gate must not hold it
AFTER_TIMEOUT = 5.0
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
#: the gate could not be reached before anyone was asked: the only kind --fail-open opens.
#: A server that answers (5xx, garbage, an error) is never "no decision".
GATE_DOWN = frozenset({"unreachable"})


class Abandoned(Exception):
    """The caller stops waiting (a signal, a cancelled task, Ctrl-C): throw it into a flow.

    `decide()` answers it by withdrawing its request (or the one its in-flight POST may have
    created) and returning an "abandoned" verdict. `drive()` throws it in itself when `send`
    or `sleep` raises it or `stopped()` names a reason.
    """

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Verdict:
    """The hook's answer: a kind and a reason written for the model.

    Kinds: approved, rejected, expired, cancelled (a request's end); allowed, denied, no_rule
    (policy); granted (a time-boxed grant let it through); mismatch (the approval is not bound
    to this call), reused (the call id was used for another call); unreachable (before anyone
    was asked), lost (during the wait), server_error (5xx), garbled (not a gate answer), error
    (another error reply), unauthorized, misconfigured, deadline, abandoned (the caller
    stopped), bad_input.
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

    def body(self, key: str | None, expires_in: float | None = None) -> dict[str, Any]:
        """The JSON body of `POST /v1/gate` (the server refuses unknown fields).

        `expires_in`: seconds until the caller gives up; the request expires no later.
        """
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
            "expires_in": expires_in,
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
    """Ask gate about `call` and wait up to `limit` seconds for the verdict (sans-IO).

    The request is created to expire a little before `limit` runs out. Throw `Abandoned`
    into the flow to stop early: it withdraws what it asked and returns an "abandoned" verdict.
    """
    words = Words(call.tool_name, url, limit, token_hint)
    progress = _Progress(call.idempotency_key)
    try:
        return (yield from _ask(call, words, progress, clock() + limit, wait_slice, clock))
    except Abandoned as stop:
        return (yield from _abandon(call, progress, stop.why, words))


class _Progress:
    """How far a flow got: what `_abandon` must withdraw."""

    __slots__ = ("key", "submitted", "request_id")

    def __init__(self, key: str | None) -> None:
        self.key = key
        self.submitted = False  # a POST /v1/gate went out (it may have created a request)
        self.request_id: str | None = None


def _ask(
    call: Call,
    words: Words,
    progress: _Progress,
    deadline: float,
    wait_slice: float,
    clock: Callable[[], float],
) -> Flow:
    # 1. submit (retried briefly: the idempotency key makes a repeated POST harmless)
    bumps = failures = 0
    send_deadline = True
    while True:
        remaining = deadline - clock()
        expires_in = _expires_in(remaining) if send_deadline else None
        progress.submitted = True
        reply = yield from _call(
            Exchange(
                "POST",
                "/v1/gate",
                call.body(progress.key, expires_in),
                max(0.1, min(SUBMIT_TIMEOUT, remaining)),
            )
        )
        if _transient(reply):
            failures += 1
            if failures < SUBMIT_ATTEMPTS and deadline - clock() > 0:
                yield Pause(min(BACKOFF_FIRST * 2 ** (failures - 1), deadline - clock()))
                continue
            return _failed(reply, words)
        if send_deadline and reply.status == 422 and "expires_in" in _error_message(reply):
            # A server older than this client: ask without a deadline (the withdrawal at the
            # caller's deadline still ends the request).
            send_deadline = False
            continue
        if reply.status == 409 and _error_code(reply) == "idempotency_key_reused":
            return Verdict("reused", words.reused(progress.key))
        if reply.status != 200 or reply.problem is not None:
            return _failed(reply, words)
        answer = reply.body
        if not isinstance(answer, dict):
            return Verdict("garbled", words.garbled(Reply(200, problem="not a JSON object")))
        decision = answer.get("decision")
        rule = answer.get("rule")
        reason = str(answer.get("reason") or "")
        if decision == "allow":
            if rule is None:
                return Verdict("no_rule", words.no_rule())
            granted = answer.get("request")
            if _is_request(granted):
                # A grant let it through: a request born approved, bound like any approval.
                assert isinstance(granted, dict)
                verdict = Verdict("granted", words.allowed(reason), rule, granted)
                return _bound(verdict, call, progress.key, words)
            return Verdict("allowed", words.allowed(reason), rule)
        if decision == "deny":
            return Verdict("denied", words.denied(rule, reason), rule)
        request = answer.get("request") if decision == "ask" else None
        if not _is_request(request):
            return Verdict("garbled", words.garbled(Reply(200, problem="not a gate answer")))
        assert isinstance(request, dict)
        progress.request_id = str(request["id"])
        if (
            call.derived_key
            and request["status"] != "pending"
            and failures == 0
            and bumps < MAX_KEY_BUMPS
        ):
            bumps += 1
            progress.key = f"{call.idempotency_key}#{bumps + 1}"
            progress.request_id = None
            continue
        break

    # 2. wait, in slices, through connection losses and restarts, until final or deadline
    request_id = str(request["id"])
    failures = 0
    last: Reply | None = None
    while request["status"] == "pending":
        remaining = deadline - clock()
        if remaining <= 0:
            final = yield from _withdraw(request_id, words)
            if final is not None:
                request = final
                break
            if last is not None and last.status >= 500:
                return Verdict("server_error", words.server_error(last, request_id), rule, request)
            if last is not None:
                problem = last.problem or f"HTTP {last.status}"
                return Verdict("lost", words.lost(request_id, problem), rule, request)
            return Verdict("deadline", words.deadline(request_id), rule, request)
        slice_ = min(wait_slice, remaining)
        reply = yield from _call(
            Exchange(
                "GET", f"/v1/requests/{request_id}/wait?timeout={slice_:.3f}", None, slice_ + 10
            )
        )
        if reply.status == 200 and _is_request(reply.body):
            request, failures, last = reply.body, 0, None
            continue
        if _transient(reply):
            # A restart (directly, or behind a proxy answering 502/503/504) is survived: the
            # request is in the database. Until the deadline, then it is a deny.
            failures += 1
            last = reply
            yield Pause(
                max(0.0, min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_CAP, deadline - clock()))
            )
            continue
        return _failed(reply, words)
    return _bound(_final(request, rule, words), call, progress.key, words)


def _expires_in(remaining: float) -> float:
    """How long the request may live: a little less than the caller waits, never more."""
    seconds = max(remaining - EXPIRY_MARGIN, remaining / 2, 0.001)
    return round(min(seconds, EXPIRES_IN_MAX), 3)


def _call(exchange: Exchange) -> Generator[Step, Reply | None, Reply]:
    reply = yield exchange
    assert reply is not None, "the driver must send a Reply for every Exchange"
    return reply


def _withdraw(
    request_id: str, words: Words, reason: str | None = None
) -> Generator[Step, Reply | None, dict[str, Any] | None]:
    """Cancel a request nobody waits for any more; return it if a decision beat the cancel."""
    reply = yield from _call(
        Exchange(
            "POST",
            f"/v1/requests/{request_id}/cancel",
            {"reason": reason or words.withdrawn()},
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


def _abandon(
    call: Call, progress: _Progress, why: str, words: Words
) -> Generator[Step, Reply | None, Verdict]:
    """The caller stopped: withdraw the request so nobody can approve it after the fact.

    The verdict is a deny whatever the request became: the caller is no longer there to run
    the call.
    """
    request_id = progress.request_id
    if request_id is None and progress.submitted and progress.key:
        # Stopped while the POST was in flight: it may have created the request.
        from urllib.parse import quote

        found = yield from _call(
            Exchange(
                "GET",
                f"/v1/requests?idempotency_key={quote(progress.key, safe='')}&limit=1",
                None,
                CANCEL_TIMEOUT,
            )
        )
        items = found.body.get("items") if isinstance(found.body, dict) else None
        if found.status == 200 and isinstance(items, list) and items and _is_request(items[0]):
            if items[0].get("tool_name") == call.tool_name:
                request_id = str(items[0]["id"])
    if request_id is None:
        return Verdict("abandoned", words.abandoned(why, None, None))
    final = yield from _withdraw(request_id, words, words.stopped(why))
    status = str(final["status"]) if final is not None else None
    return Verdict("abandoned", words.abandoned(why, request_id, status), request=final)


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


def _error_message(reply: Reply) -> str:
    err = reply.body.get("error") if isinstance(reply.body, dict) else None
    return str(err.get("message")) if isinstance(err, dict) else ""


def _transient(reply: Reply) -> bool:
    return reply.status == 0 or reply.status in (429, 500, 502, 503, 504)


def _is_request(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("id"), str) and "status" in value


def _failed(reply: Reply, words: Words) -> Verdict:
    """A reply that is not an answer: each cause has its own kind and wording."""
    if reply.status == 0:
        return Verdict("unreachable", words.unreachable(reply.problem or "no answer"))
    if reply.status >= 500:
        return Verdict("server_error", words.server_error(reply))
    if reply.problem is not None or (200 <= reply.status < 400):
        # Not JSON, a shape gate never sends, or a redirect (gate's API never redirects: a
        # login page or a proxy does).
        return Verdict("garbled", words.garbled(reply))
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
    stopped: Callable[[], str | None] | None = None,
) -> T:
    """Run a flow to its result (a Verdict, or a Report) with a blocking `send`.

    A stop is thrown into the flow as `Abandoned` and the exchanges it then needs (the
    withdrawal) are still sent: `Abandoned` raised by `send` or `sleep`, Ctrl-C (re-raised
    once the flow is done), or `stopped()` naming a reason before a step. A second stop
    during the withdrawal only cuts it short.
    """
    interrupted: KeyboardInterrupt | None = None
    thrown = False
    try:
        step = next(flow)
        while True:
            reply: Reply | None = None
            try:
                why = None if thrown or stopped is None else stopped()
                if why is not None:
                    raise Abandoned(why)
                if isinstance(step, Pause):
                    sleep(step.seconds)
                else:
                    reply = send(step)
            except (Abandoned, KeyboardInterrupt) as stop:
                if isinstance(stop, KeyboardInterrupt):
                    interrupted = interrupted or stop
                    stop = Abandoned("interrupted (Ctrl-C)")
                if not thrown:
                    thrown = True
                    step = flow.throw(stop)
                    continue
                reply = None if isinstance(step, Pause) else Reply(0, problem=stop.why)
            step = flow.send(reply)
    except StopIteration as done:
        if interrupted is not None:
            raise interrupted from None
        result: T = done.value
        return result


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


# After the call (kept importable from here, where adapters look for the whole flow).
from gate.aftercall import Report, end_session, outcome_of, report_outcome  # noqa: E402

__all__ = [
    "Abandoned",
    "Call",
    "Exchange",
    "Pause",
    "Reply",
    "Report",
    "Verdict",
    "decide",
    "derived_key",
    "drive",
    "end_session",
    "outcome_of",
    "report_outcome",
    "summarise",
]
