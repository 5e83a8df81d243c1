"""After the call, sans-IO: the outcome is recorded on the request found by its key (once, with
a retry), a session's end withdraws its requests, and a tool's response reads as ran/failed."""

from __future__ import annotations

from typing import Any

import pytest

from gate.asking.aftercall import Report, end_session, outcome_of, report_outcome
from gate.asking.binding import call_hash
from gate.asking.exchange import Reply
from tests.hooks.test_askflow import request

ARGS = {"command": "deploy prod"}
KEY = "toolu_01"


def approved(**extra: Any) -> dict[str, Any]:
    return request("approved", reason="Approved by alice in Slack", **extra)


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
