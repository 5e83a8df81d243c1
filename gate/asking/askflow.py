"""Asking gate about one call: submit it, wait for the verdict, withdraw on deadline (sans-IO).

`decide()` is a generator that takes a `Call`, yields the HTTP exchanges and pauses it
needs (see `gate.asking.exchange`) and returns a `Verdict` (`gate.asking.toolcall`) whose reason is
written for the model (`gate.asking.wording`). `gate hook` drives it with urllib, `gate.client` with
httpx (sync or async), `gate.mcp` with anyio, so every adapter waits, reconnects, withdraws and
words its answers the same way.

A yes is checked before it is trusted: the verdict's `args_hash` must equal
`gate.asking.binding.call_hash` over what will actually run (the approver's edited arguments, else
the call's own) and the idempotency key that was sent, or the call is refused.

The request never outlives its asker: the POST carries `expires_in` (a little less than the
time the caller will wait), and a caller that stops early (a signal, a cancelled task,
Ctrl-C) throws `Abandoned` into the flow, which then withdraws the request, or the one its
in-flight POST may have created, before it returns.

Only "the gate could not be reached before anyone was asked" is a `GATE_DOWN` verdict (what
`--fail-open` opens). A server that answers 5xx, or answers something that is not a gate
answer, is a deny with its own wording, however it is configured.

What happens after the call (the outcome, a session's end) is `gate.asking.aftercall`. Standard
library only: `gate hook` imports this on every tool call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator

from gate.asking.exchange import (
    BACKOFF_CAP,
    BACKOFF_FIRST,
    Abandoned,
    Exchange,
    Reply,
    Step,
    is_request,
    pause_after,
    round_trip,
    transient,
)
from gate.asking.toolcall import Call, Verdict
from gate.asking.wording import TOKEN_FIX, Words

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
#: Claude Code kills a command hook after 600 s by default and then lets the call through its
#: normal permission flow; stopping 60 s earlier leaves time to withdraw the request and answer.
DEFAULT_TIMEOUT = 540.0
#: one long-poll at most: longer than the server's cap (`server.max_wait_seconds`, 300 s by
#: default), which then ends each slice at a time of its own, spread so thousands of waiting
#: agents do not poll again together (issue 28, item 7). Usually the whole wait is one or two.
WAIT_SLICE = 600.0
#: a slice cut short by what looks like a proxy's idle timeout (a 502, 504 or lost connection
#: after at least this long) makes the next slices this share of how long it lasted
PROXY_CUT_AFTER, PROXY_CUT_SHARE = 10.0, 0.8
#: POST /v1/gate tries (a restart blip is survived, a dead server is reported in ~1 s)
SUBMIT_ATTEMPTS = 3
SUBMIT_TIMEOUT = 15.0
#: withdrawing is the last thing a stopping caller does: short, so a kill that follows its
#: SIGTERM a few seconds later still finds it done
CANCEL_TIMEOUT = 3.0
#: the request expires this long before the caller gives up: the server's expiry sweep (1 s
#: by default) then ends it before the caller has to withdraw it
EXPIRY_MARGIN = 2.0
#: the largest `expires_in` the server accepts (gate.api.schemas.EXPIRES_IN_MAX)
EXPIRES_IN_MAX = 30 * 24 * 3600.0
#: a derived key that finds an earlier, finished request asks again under key#2, key#3, ...
MAX_KEY_BUMPS = 50
FINAL = frozenset({"approved", "rejected", "expired", "cancelled"})


Flow = Generator[Step, Reply | None, Verdict]


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
    `token_hint` tells the user how to give this caller a token.
    """
    words = Words(call.tool_name, url, limit, token_hint)
    asking = _Asking(call, words, clock() + limit, clock)
    try:
        answer = yield from _submit(asking)
        if isinstance(answer, Verdict):
            return answer
        request, rule = answer
        return (yield from _await(asking, request, rule, wait_slice))
    except Abandoned as stop:
        return (yield from _abandon(asking, stop.why))


class _Asking:
    """One flow's call, words and deadline, and how far it got (what `_abandon` withdraws)."""

    __slots__ = ("call", "words", "deadline", "clock", "key", "submitted", "request_id")

    def __init__(
        self, call: Call, words: Words, deadline: float, clock: Callable[[], float]
    ) -> None:
        self.call, self.words, self.deadline, self.clock = call, words, deadline, clock
        self.key = call.idempotency_key
        self.submitted = False  # a POST /v1/gate went out (it may have created a request)
        self.request_id: str | None = None

    def remaining(self) -> float:
        """Seconds until the caller gives up."""
        return self.deadline - self.clock()


def _submit(
    asking: _Asking,
) -> Generator[Step, Reply | None, Verdict | tuple[dict[str, Any], str | None]]:
    """POST the call (retried briefly: the idempotency key makes a repeat harmless).

    Returns the verdict when policy (or a failure) settled it, else the request and its rule.
    """
    call = asking.call
    bumps = failures = 0
    send_deadline = True
    while True:
        remaining = asking.remaining()
        expires_in = _expires_in(remaining) if send_deadline else None
        asking.submitted = True
        body = call.body(asking.key, expires_in)
        timeout = max(0.1, min(SUBMIT_TIMEOUT, remaining))
        reply = yield from round_trip(Exchange("POST", "/v1/gate", body, timeout))
        if transient(reply):
            failures += 1
            if failures < SUBMIT_ATTEMPTS and asking.remaining() > 0:
                backoff = BACKOFF_FIRST * 2 ** (failures - 1)
                yield pause_after(reply, backoff, asking.remaining())
                continue
            return _failed(reply, asking.words)
        if send_deadline and reply.status == 422 and "expires_in" in _error_message(reply):
            # A server older than this client: ask without a deadline (the withdrawal at the
            # caller's deadline still ends the request).
            send_deadline = False
            continue
        answer = _answer(reply, asking)
        if isinstance(answer, str) and call.derived_key and bumps < MAX_KEY_BUMPS:
            # an earlier, identical call ran on its approval: this one is asked afresh
            bumps += 1
            asking.key = f"{call.idempotency_key}#{bumps + 1}"
            continue
        if isinstance(answer, str):  # `_SPENT`
            return Verdict("spent", asking.words.spent(asking.key))
        if isinstance(answer, Verdict):
            return answer
        request, _ = answer
        asking.request_id = str(request["id"])
        if call.derived_key and request["status"] != "pending" and failures == 0:
            if bumps < MAX_KEY_BUMPS:
                # An earlier, identical call's answer: this call is asked about afresh.
                bumps += 1
                asking.key = f"{call.idempotency_key}#{bumps + 1}"
                asking.request_id = None
                continue
        return answer


#: `_answer`'s word for a key whose approved call already ran (`approval_spent`)
_SPENT = "spent"


def _answer(reply: Reply, asking: _Asking) -> Verdict | str | tuple[dict[str, Any], str | None]:
    """What a reply to the POST says: a verdict, `_SPENT`, or the request to wait for and
    its rule."""
    words = asking.words
    if reply.status == 409 and _error_code(reply) == "idempotency_key_reused":
        return Verdict("reused", words.reused(asking.key))
    if reply.status == 409 and _error_code(reply) == "approval_spent":
        return _SPENT
    if reply.status == 422 and _error_code(reply) == "justification_required":
        return Verdict("unjustified", words.unjustified(_error_message(reply)))
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
        if is_request(granted):
            # A grant let it through: a request born approved, bound like any approval.
            verdict = Verdict("granted", words.allowed(reason), rule, granted)
            return _bound(verdict, asking.call, asking.key, words)
        return Verdict("allowed", words.allowed(reason), rule)
    if decision == "deny":
        return Verdict("denied", words.denied(rule, reason), rule)
    request = answer.get("request") if decision == "ask" else None
    if not is_request(request):
        return Verdict("garbled", words.garbled(Reply(200, problem="not a gate answer")))
    assert isinstance(request, dict)
    return request, rule


def _await(asking: _Asking, request: dict[str, Any], rule: str | None, wait_slice: float) -> Flow:
    """Wait in slices, through connection losses and restarts, until final or deadline."""
    words = asking.words
    request_id = str(request["id"])
    failures = 0
    last: Reply | None = None
    while request["status"] == "pending":
        remaining = asking.remaining()
        if remaining <= 0:
            final = yield from _withdraw(request_id, words)
            if final is not None:
                request = final
                break
            return _gave_up(request, rule, last, words)
        slice_ = min(wait_slice, remaining)
        path = f"/v1/requests/{request_id}/wait?timeout={slice_:.3f}"
        began = asking.clock()
        reply = yield from round_trip(Exchange("GET", path, None, slice_ + 10))
        if reply.status == 200 and is_request(reply.body):
            request, failures, last = reply.body, 0, None
            continue
        if not transient(reply):
            return _failed(reply, words)
        wait_slice = _under_proxy(wait_slice, reply, asking.clock() - began)
        # A restart (directly, or behind a proxy answering 502/503/504) is survived: the
        # request is in the database. So is a server holding all the waiters it may (503
        # too_many_waiters): its Retry-After says when to poll again. Until the deadline,
        # then it is a deny.
        failures += 1
        last = reply
        backoff = min(BACKOFF_FIRST * 2 ** min(failures - 1, 10), BACKOFF_CAP)
        yield pause_after(reply, backoff, asking.remaining())
    return _bound(_final(request, rule, words), asking.call, asking.key, words)


def _under_proxy(wait_slice: float, reply: Reply, lasted: float) -> float:
    """The slice to ask for next: shorter than a proxy that cut this one after `lasted` s."""
    if reply.status in (0, 502, 504) and lasted >= PROXY_CUT_AFTER:
        return min(wait_slice, lasted * PROXY_CUT_SHARE)
    return wait_slice


def _gave_up(
    request: dict[str, Any], rule: str | None, last: Reply | None, words: Words
) -> Verdict:
    """The deadline passed with the request still pending (and now withdrawn)."""
    request_id = str(request["id"])
    if last is not None and last.status >= 500:
        return Verdict("server_error", words.server_error(last, request_id), rule, request)
    if last is not None:
        problem = last.problem or f"HTTP {last.status}"
        return Verdict("lost", words.lost(request_id, problem), rule, request)
    return Verdict("deadline", words.deadline(request_id), rule, request)


def _expires_in(remaining: float) -> float:
    """How long the request may live: a little less than the caller waits, never more."""
    seconds = max(remaining - EXPIRY_MARGIN, remaining / 2, 0.001)
    return round(min(seconds, EXPIRES_IN_MAX), 3)


def _withdraw(
    request_id: str, words: Words, reason: str | None = None
) -> Generator[Step, Reply | None, dict[str, Any] | None]:
    """Cancel a request nobody waits for any more; return it if a decision beat the cancel."""
    body = {"reason": reason or words.withdrawn()}
    path = f"/v1/requests/{request_id}/cancel"
    reply = yield from round_trip(Exchange("POST", path, body, CANCEL_TIMEOUT))
    if reply.status == 200 and is_request(reply.body) and reply.body["status"] != "cancelled":
        return dict(reply.body)
    if reply.status == 409:
        # Decided between our last poll and the cancel: that verdict stands.
        path = f"/v1/requests/{request_id}"
        again = yield from round_trip(Exchange("GET", path, None, CANCEL_TIMEOUT))
        if again.status == 200 and is_request(again.body) and again.body["status"] in FINAL:
            if again.body["status"] != "cancelled":
                return dict(again.body)
    return None


def _abandon(asking: _Asking, why: str) -> Generator[Step, Reply | None, Verdict]:
    """The caller stopped: withdraw the request so nobody can approve it after the fact.

    The verdict is a deny whatever the request became: the caller is no longer there to run
    the call.
    """
    words = asking.words
    request_id = asking.request_id
    if request_id is None and asking.submitted and asking.key:
        # Stopped while the POST was in flight: it may have created the request.
        from urllib.parse import quote  # only a caller stopped mid-POST needs it

        path = f"/v1/requests?idempotency_key={quote(asking.key, safe='')}&limit=1"
        found = yield from round_trip(Exchange("GET", path, None, CANCEL_TIMEOUT))
        items = found.body.get("items") if isinstance(found.body, dict) else None
        if found.status == 200 and isinstance(items, list) and items and is_request(items[0]):
            if items[0].get("tool_name") == asking.call.tool_name:
                request_id = str(items[0]["id"])
    if request_id is None:
        return Verdict("abandoned", words.abandoned(why, None, None))
    final = yield from _withdraw(request_id, words, words.stopped(why))
    status = str(final["status"]) if final is not None else None
    return Verdict("abandoned", words.abandoned(why, request_id, status), request=final)


def _bound(verdict: Verdict, call: Call, key: str | None, words: Words) -> Verdict:
    """Let a yes through only if it was given for exactly this call (see gate.asking.binding)."""
    if not verdict.allowed or verdict.request is None:
        return verdict
    from gate.asking.binding import call_hash  # only calls a person (or a grant) decided need it

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


__all__ = [
    "CANCEL_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "DEFAULT_URL",
    "WAIT_SLICE",
    "Flow",
    "decide",
]
