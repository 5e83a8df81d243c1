"""The sans-IO flow on its own: races and retries that are hard to time against a live server.

The flow yields the HTTP exchanges it wants; these tests answer them from a script, with a
clock that moves only when the flow pauses or a long-poll runs out.
"""

from __future__ import annotations

from typing import Any

from gate.asking.askflow import decide
from gate.asking.binding import call_hash
from gate.asking.exchange import Exchange, Pause, Reply
from gate.asking.toolcall import Call, Verdict

URL = "http://gate.test"


def request(status: str = "pending", key: str = "k", **extra: Any) -> dict[str, Any]:
    """A request as the server shows it, bound to a `Bash {}` call made under `key`."""
    return {
        "id": "r1",
        "status": status,
        "reason": extra.pop("reason", None),
        "args_hash": call_hash("Bash", {}, key),
        **extra,
    }


class Script:
    """Answers each Exchange with the next scripted reply; records what was asked."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.asked: list[Exchange] = []
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def run(self, call: Call, limit: float = 10) -> Verdict:
        flow = decide(call, url=URL, limit=limit, clock=self.clock)
        try:
            step = next(flow)
            while True:
                if isinstance(step, Pause):
                    self.now += step.seconds
                    step = flow.send(None)
                    continue
                self.asked.append(step)
                if "/wait?" in step.path:
                    self.now += float(step.path.rsplit("=", 1)[1])  # the poll ran its course
                step = flow.send(self.replies.pop(0))
        except StopIteration as stop:
            assert not self.replies, "unused replies"
            verdict: Verdict = stop.value
            return verdict


def ask(req: dict[str, Any]) -> Reply:
    return Reply(200, {"decision": "ask", "rule": "r", "reason": "x", "request": req})


def test_a_decision_that_beats_the_withdrawal_stands() -> None:
    script = Script(
        ask(request()),
        Reply(200, request()),  # the one long-poll that fits in the limit
        Reply(409, {"error": {"code": "already_decided", "message": "approved by bob"}}),
        Reply(200, request("approved", reason="Approved by bob in Slack")),
    )

    verdict = script.run(Call("Bash", idempotency_key="k"), limit=5)

    assert (verdict.kind, verdict.reason) == ("approved", "gate: Approved by bob in Slack.")
    assert [e.method + " " + e.path.split("?")[0] for e in script.asked] == [
        "POST /v1/gate",
        "GET /v1/requests/r1/wait",
        "POST /v1/requests/r1/cancel",
        "GET /v1/requests/r1",
    ]


def test_submit_survives_a_restart_blip_with_the_same_key() -> None:
    script = Script(Reply(0, problem="connection refused"), Reply(503), ask(request("approved")))

    verdict = script.run(Call("Bash", idempotency_key="k"))

    assert verdict.kind == "approved"
    assert [e.body["idempotency_key"] for e in script.asked if e.body] == ["k", "k", "k"]


def test_a_derived_key_that_finds_an_old_answer_asks_again() -> None:
    script = Script(
        ask(request("rejected", reason="Rejected by bob in Slack: no")),
        ask(request()),
        Reply(200, request("approved", key="cmd:abc#2", reason="Approved by alice in Slack")),
    )

    verdict = script.run(Call("Bash", idempotency_key="cmd:abc", derived_key=True))

    assert verdict.kind == "approved"
    assert [e.body["idempotency_key"] for e in script.asked if e.body] == ["cmd:abc", "cmd:abc#2"]


def test_a_tool_use_id_that_finds_an_answer_keeps_it() -> None:
    script = Script(ask(request("rejected", reason="Rejected by bob in Slack: no")))

    verdict = script.run(Call("Bash", idempotency_key="toolu_1"))

    assert verdict.kind == "rejected"


def test_an_unknown_request_mid_wait_is_a_gate_error() -> None:
    script = Script(
        ask(request()),
        Reply(404, {"error": {"code": "not_found", "message": "no request r1"}}),
    )

    verdict = script.run(Call("Bash", idempotency_key="k"))

    assert verdict.kind == "error"
    assert "(HTTP 404 not_found: no request r1)" in verdict.reason


def test_garbage_from_the_server_fails_closed() -> None:
    script = Script(Reply(200, ["not", "an", "answer"]))

    verdict = script.run(Call("Bash"))

    assert (verdict.kind, verdict.allowed) == ("garbled", False)
