"""The sans-IO flow when its caller stops early, when the server fails, and the deadline it
sends: driven by `drive()` with a scripted `send` that can raise like a signal handler does."""

from __future__ import annotations

from typing import Any

import pytest

from gate.asking.askflow import CANCEL_TIMEOUT, EXPIRY_MARGIN, decide
from gate.asking.binding import call_hash
from gate.asking.exchange import Abandoned, Exchange, Reply, drive
from gate.asking.toolcall import GATE_DOWN, Call, Verdict

URL = "http://gate.test"
STOP = object()  # in a script: the signal lands while this exchange is in flight


def request(status: str = "pending", key: str = "k", **extra: Any) -> dict[str, Any]:
    return {"id": "r1", "status": status, "tool_name": "Bash", **extra} | {
        "args_hash": call_hash("Bash", {}, key)
    }


def ask(req: dict[str, Any]) -> Reply:
    return Reply(200, {"decision": "ask", "rule": "r", "reason": "x", "request": req})


class Script:
    """Answers each exchange with the next reply; STOP raises Abandoned (or another error)."""

    def __init__(self, *replies: Any, raises: BaseException | None = None) -> None:
        self.replies = list(replies)
        self.asked: list[Exchange] = []
        self.raises = raises or Abandoned("SIGTERM")
        self.slept: list[float] = []

    def send(self, exchange: Exchange) -> Reply:
        self.asked.append(exchange)
        reply = self.replies.pop(0)
        if reply is STOP:
            raise self.raises
        assert isinstance(reply, Reply)
        return reply

    def run(self, call: Call, limit: float = 30, **kw: Any) -> Verdict:
        verdict = drive(decide(call, url=URL, limit=limit), self.send, self.slept.append, **kw)
        assert not self.replies, "unused replies"
        return verdict

    def paths(self) -> list[str]:
        return [f"{e.method} {e.path.split('?')[0]}" for e in self.asked]


# -- stopped while waiting, or while asking ----------------------------------------------------


def test_a_stop_during_the_wait_withdraws_the_request() -> None:
    script = Script(ask(request()), STOP, Reply(200, request("cancelled")))

    verdict = script.run(Call("Bash", idempotency_key="k"))

    assert (verdict.kind, verdict.allowed) == ("abandoned", False)
    assert verdict.reason == (
        "gate: The hook was stopped (SIGTERM) while this Bash call waited for approval, so "
        "approval request r1 was withdrawn and gate did not let the call through. No human "
        "rejected it."
    )
    cancel = script.asked[-1]
    assert script.paths() == [
        "POST /v1/gate",
        "GET /v1/requests/r1/wait",
        "POST /v1/requests/r1/cancel",
    ]
    assert cancel.body == {"reason": "the agent's hook was stopped (SIGTERM) before anyone decided"}
    assert cancel.timeout == CANCEL_TIMEOUT


def test_a_stop_while_the_ask_is_in_flight_finds_the_request_by_key_and_withdraws_it() -> None:
    script = Script(
        STOP,
        Reply(200, {"items": [request()]}),
        Reply(200, request("cancelled")),
    )

    verdict = script.run(Call("Bash", idempotency_key="toolu 1/2"))

    assert verdict.kind == "abandoned"
    assert script.paths() == ["POST /v1/gate", "GET /v1/requests", "POST /v1/requests/r1/cancel"]
    assert script.asked[1].path == "/v1/requests?idempotency_key=toolu%201%2F2&limit=1"


def test_a_stop_before_the_request_existed_withdraws_nothing() -> None:
    script = Script(STOP, Reply(200, {"items": []}))

    verdict = script.run(Call("Bash", idempotency_key="k"))

    assert verdict.kind == "abandoned"
    assert "before it had asked about this Bash call" in verdict.reason
    assert script.paths() == ["POST /v1/gate", "GET /v1/requests"]


def test_a_request_found_by_key_for_another_tool_is_left_alone() -> None:
    other = {**request(), "tool_name": "Write"}
    script = Script(STOP, Reply(200, {"items": [other]}))

    assert script.run(Call("Bash", idempotency_key="k")).kind == "abandoned"
    assert script.paths() == ["POST /v1/gate", "GET /v1/requests"]


def test_a_decision_that_beat_the_withdrawal_is_still_not_a_yes() -> None:
    approved = request("approved", reason="Approved by bob in Slack")
    script = Script(
        ask(request()),
        STOP,
        Reply(409, {"error": {"code": "already_decided", "message": "approved by bob"}}),
        Reply(200, approved),
    )

    verdict = script.run(Call("Bash", idempotency_key="k"))

    # Nobody is left to run the call: the caller is going away.
    assert (verdict.kind, verdict.allowed) == ("abandoned", False)
    assert "just as approval request r1 was approved" in verdict.reason
    assert verdict.request == approved


def test_stopped_names_a_reason_before_the_next_step() -> None:
    reasons = iter([None, "SIGHUP"])
    script = Script(ask(request()), Reply(200, request("cancelled")))

    verdict = script.run(Call("Bash", idempotency_key="k"), stopped=lambda: next(reasons))

    assert verdict.kind == "abandoned"
    assert "(SIGHUP)" in verdict.reason
    assert script.paths() == ["POST /v1/gate", "POST /v1/requests/r1/cancel"]


def test_a_second_stop_during_the_withdrawal_cuts_it_short() -> None:
    script = Script(ask(request()), STOP, STOP)

    verdict = script.run(Call("Bash", idempotency_key="k"))

    assert verdict.kind == "abandoned"
    assert script.paths()[-1] == "POST /v1/requests/r1/cancel"


def test_ctrl_c_withdraws_then_goes_on() -> None:
    script = Script(
        ask(request()), STOP, Reply(200, request("cancelled")), raises=KeyboardInterrupt()
    )

    with pytest.raises(KeyboardInterrupt):
        script.run(Call("Bash", idempotency_key="k"))

    assert script.paths()[-1] == "POST /v1/requests/r1/cancel"
    assert "(interrupted (Ctrl-C))" in script.asked[-1].body["reason"]


# -- the deadline the request carries --------------------------------------------------------


@pytest.mark.parametrize(("limit", "sent"), [(540, 540 - EXPIRY_MARGIN), (3, 1.5), (0, 0.001)])
def test_the_request_carries_the_callers_deadline_less_a_margin(limit: float, sent: float) -> None:
    script = Script(Reply(200, {"decision": "allow", "rule": None, "reason": ""}))

    script.run(Call("Bash", idempotency_key="k"), limit=limit)

    assert script.asked[0].body["expires_in"] == pytest.approx(sent, abs=0.01)
    assert script.asked[0].body["expires_in"] <= max(limit, 0.001)


def test_a_server_that_does_not_know_expires_in_is_asked_without_it() -> None:
    old = Reply(
        422,
        {
            "error": {
                "code": "invalid_input",
                "message": "expires_in: Extra inputs are not permitted",
            }
        },
    )
    script = Script(old, Reply(200, {"decision": "allow", "rule": None, "reason": ""}))

    verdict = script.run(Call("Bash", idempotency_key="k"))

    assert verdict.kind == "no_rule"
    assert "expires_in" in script.asked[0].body
    assert "expires_in" not in script.asked[1].body


def test_another_422_is_an_error_not_a_retry() -> None:
    bad = Reply(422, {"error": {"code": "invalid_input", "message": "tool_name: too long"}})
    script = Script(bad)

    assert script.run(Call("Bash", idempotency_key="k")).kind == "error"


# -- a failing server is a deny of its own, never "gate down" --------------------------------


@pytest.mark.parametrize(
    ("replies", "kind", "says"),
    [
        ([Reply(500)] * 3, "server_error", "failed (HTTP 500)"),
        ([Reply(502)] * 3, "server_error", "failed (HTTP 502)"),
        (
            [Reply(200, problem="the reply is not JSON (text/html, 9 bytes)")],
            "garbled",
            "text/html",
        ),
        ([Reply(200, {"decision": "maybe"})], "garbled", "not a gate answer"),
        ([Reply(200, None)], "garbled", "not a JSON object"),
        ([Reply(404, problem="the reply is not JSON (text/html, 9 bytes)")], "garbled", "HTTP 404"),
        ([Reply(0, problem="connection refused")] * 3, "unreachable", "connection refused"),
    ],
)
def test_each_kind_of_failure_has_its_own_verdict(
    replies: list[Reply], kind: str, says: str
) -> None:
    verdict = Script(*replies).run(Call("Bash", idempotency_key="k"))

    assert (verdict.kind, verdict.allowed) == (kind, False)
    assert says in verdict.reason
    assert (verdict.kind in GATE_DOWN) == (kind == "unreachable")


def test_a_server_failing_through_the_wait_is_a_server_error_at_the_deadline() -> None:
    clock = [0.0]
    replies = [ask(request())] + [Reply(500)] * 200 + [Reply(200, request("cancelled"))]
    sent: list[Exchange] = []

    def send(exchange: Exchange) -> Reply:
        sent.append(exchange)
        if "/wait" in exchange.path:
            clock[0] += 1
        return replies.pop(0)

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    flow = decide(Call("Bash", idempotency_key="k"), url=URL, limit=5, clock=lambda: clock[0])
    verdict = drive(flow, send, sleep)

    assert verdict.kind == "server_error"
    assert "failed (HTTP 500) while the hook waited for a decision on request r1" in verdict.reason
    assert sent[-1].path == "/v1/requests/r1/cancel"
