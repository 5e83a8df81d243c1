"""The sans-IO flow's checks beyond yes/no: binding, edits, grants, reuse, outcome, session end."""

from __future__ import annotations

from typing import Any

import pytest

from gate.binding import call_hash
from gate.protocol import (
    Call,
    Reply,
    Report,
    end_session,
    outcome_of,
    report_outcome,
)
from tests.hooks.test_protocol import Script, ask, request

ARGS = {"command": "deploy prod"}
KEY = "toolu_01"


def approved(**extra: Any) -> dict[str, Any]:
    return request("approved", reason="Approved by alice in Slack", **extra)


def test_a_verdict_for_other_arguments_is_refused() -> None:
    # (c) a tampered verdict: approved, but bound to other arguments than this call's
    tampered = approved(args_hash=call_hash("Bash", {"command": "deploy staging"}, KEY))
    script = Script(ask(request()), Reply(200, tampered))

    verdict = script.run(Call("Bash", ARGS, idempotency_key=KEY))

    expected = call_hash("Bash", ARGS, KEY)
    assert (verdict.kind, verdict.allowed, verdict.updated_args) == ("mismatch", False, None)
    assert verdict.reason == (
        "gate: The approval does not match this Bash call: request r1 was approved for other "
        f"arguments or another call id (approval bound to {tampered['args_hash'][:12]}…, this "
        f"call is {expected[:12]}…), so the call was blocked. Nobody approved these exact "
        "arguments: ask for approval again, or tell the user."
    )


@pytest.mark.parametrize(
    "args_hash",
    [
        call_hash("Bash", ARGS, "toolu_other"),  # another call id
        call_hash("Write", ARGS, KEY),  # another tool
        call_hash("Bash", ARGS),  # no call id
        None,  # no binding at all
    ],
    ids=["call-id", "tool", "no-call-id", "missing"],
)
def test_every_other_binding_is_refused(args_hash: str | None) -> None:
    script = Script(ask(request()), Reply(200, approved(args_hash=args_hash)))

    assert script.run(Call("Bash", ARGS, idempotency_key=KEY)).kind == "mismatch"


def test_edited_arguments_are_checked_against_the_binding() -> None:
    edited = {"command": "deploy staging"}
    good = approved(approved_args=edited, args_hash=call_hash("Bash", edited, KEY))
    # Edited arguments in the verdict, but the hash of the original ones: not what will run.
    bad = approved(approved_args=edited, args_hash=call_hash("Bash", ARGS, KEY))

    ok = Script(ask(request()), Reply(200, good)).run(Call("Bash", ARGS, idempotency_key=KEY))
    refused = Script(ask(request()), Reply(200, bad)).run(Call("Bash", ARGS, idempotency_key=KEY))

    assert (ok.kind, ok.updated_args) == ("approved", edited)
    assert ok.reason == (
        "gate: Approved by alice in Slack. The Bash call runs with the arguments as the approver "
        "edited them, not as they were sent."
    )
    assert (refused.kind, refused.updated_args) == ("mismatch", None)


def test_a_grant_is_checked_like_an_approval() -> None:
    reason = "Allowed by a grant from alice (scope: session, until 2026-01-01 10:00 UTC)"

    def granted(args_hash: str) -> Reply:
        req = approved(args_hash=args_hash, decided_via="grant")
        return Reply(
            200, {"decision": "allow", "rule": "deploys", "reason": reason, "request": req}
        )

    ok = Script(granted(call_hash("Bash", ARGS, KEY))).run(Call("Bash", ARGS, idempotency_key=KEY))
    bad = Script(granted("0" * 64)).run(Call("Bash", ARGS, idempotency_key=KEY))

    assert (ok.kind, ok.allowed, ok.reason) == ("granted", True, f"gate: {reason}.")
    assert (bad.kind, bad.allowed) == ("mismatch", False)


def test_a_reused_call_id_is_its_own_refusal() -> None:
    script = Script(
        Reply(409, {"error": {"code": "idempotency_key_reused", "message": "used before"}})
    )

    verdict = script.run(Call("Bash", ARGS, idempotency_key=KEY))

    assert verdict.kind == "reused"
    assert verdict.reason.startswith(f"gate: The call id {KEY!r} was already used for a different")


# -- outcome and session end ----------------------------------------------------------------


def run(flow: Any, *replies: Reply) -> tuple[Report, list[Any]]:
    asked, pending = [], list(replies)
    try:
        step = next(flow)
        while True:
            if hasattr(step, "path"):
                asked.append(step)
                step = flow.send(pending.pop(0))
            else:
                step = flow.send(None)
    except StopIteration as stop:
        assert not pending
        return stop.value, asked


def test_outcome_finds_the_request_by_key_and_records_it() -> None:
    found = {"items": [approved(tool_name="Bash", args_hash=call_hash("Bash", ARGS, KEY))]}
    report, asked = run(
        report_outcome(key=KEY, tool_name="Bash", outcome="ran", summary="ok", tool_args=ARGS),
        Reply(200, found),
        Reply(200, approved()),
    )

    assert (report.kind, report.request_ids) == ("recorded", ["r1"])
    assert [(e.method, e.path, e.body) for e in asked] == [
        ("GET", f"/v1/requests?idempotency_key={KEY}&limit=1", None),
        ("POST", "/v1/requests/r1/outcome", {"outcome": "ran", "summary": "ok"}),
    ]


def test_outcome_retries_a_blip_and_skips_what_it_cannot_record() -> None:
    found = {"items": [approved(tool_name="Bash")]}
    blip, _ = run(
        report_outcome(key="a/b", tool_name="Bash", outcome="ran", summary=None),
        Reply(0, problem="connection refused"),
        Reply(200, found),
        Reply(409, {"error": {"code": "outcome_recorded", "message": "already ran"}}),
    )
    other_tool, _ = run(
        report_outcome(key=KEY, tool_name="Write", outcome="ran", summary=None), Reply(200, found)
    )
    rejected, _ = run(
        report_outcome(key=KEY, tool_name="Bash", outcome="ran", summary=None),
        Reply(200, {"items": [request("rejected", tool_name="Bash")]}),
    )
    down, _ = run(
        report_outcome(key=KEY, tool_name="Bash", outcome="ran", summary=None),
        Reply(503),
        Reply(503),
    )

    assert blip.kind == "skipped" and "outcome_recorded" in blip.text
    assert other_tool.kind == "ungated"
    assert (rejected.kind, rejected.text) == ("skipped", "request r1 is rejected: nothing ran")
    assert down.kind == "failed"


def test_session_end_quotes_the_session_id() -> None:
    report, asked = run(end_session("a b/c", "the session ended"), Reply(200, {"cancelled": ["x"]}))

    assert (report.kind, report.request_ids) == ("cancelled", ["x"])
    assert asked[0].path == "/v1/sessions/a%20b%2Fc/cancel"
    assert asked[0].body == {"reason": "the session ended"}


@pytest.mark.parametrize(
    ("response", "error", "expected"),
    [
        ({"stdout": "done\n", "stderr": "", "interrupted": False}, None, ("ran", "done")),
        ({"stdout": "", "stderr": "warn"}, None, ("ran", "warn")),
        ({"filePath": "/a", "success": True}, None, ("ran", '{"filePath": "/a", "success": true}')),
        ({"success": False}, None, ("failed", '{"success": false}')),
        (
            {"is_error": True, "content": "x"},
            None,
            ("failed", '{"is_error": true, "content": "x"}'),
        ),
        ("plain text\nresult", None, ("ran", "plain text result")),
        (None, "Exit code 2", ("failed", "Exit code 2")),
        (None, None, ("ran", None)),
        ("x" * 1000, None, ("ran", "x" * 299 + "…")),
    ],
)
def test_outcome_of_a_tool_response(response: Any, error: Any, expected: tuple[str, Any]) -> None:
    assert outcome_of(response, error) == expected
