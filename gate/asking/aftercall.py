"""After the call, sans-IO like `gate.asking.askflow.decide()`: record the outcome, end a session.

`report_outcome()` records whether an approved call ran (`POST /v1/requests/{id}/outcome`);
`end_session()` withdraws a finished session's pending requests. Neither may hold the agent
up: short timeouts, one retry, and a `Report` instead of an exception. Standard library only
(`gate hook --event post-tool` runs it).
"""

from __future__ import annotations

import json
from collections.abc import Generator
from urllib.parse import quote

from gate.asking.exchange import (
    BACKOFF_FIRST,
    Exchange,
    Pause,
    Reply,
    Step,
    is_request,
    round_trip,
    transient,
)
from gate.asking.wording import error_text

# Not `typing.TYPE_CHECKING`: importing typing alone costs milliseconds on every tool call.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: post-tool and session-end calls: the agent has moved on, a slow gate must not hold it
AFTER_TIMEOUT = 5.0
#: an outcome summary is a glance at the result for the audit trail, not the result itself
OUTCOME_SUMMARY_MAX = 300


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
    if not items or not is_request(items[0]) or items[0].get("tool_name") != tool_name:
        return Report("ungated", f"no approval request was made for {tool_name} call {key!r}")
    request = items[0]
    request_id = str(request["id"])
    if request["status"] != "approved":
        return Report("skipped", f"request {request_id} is {request['status']}: nothing ran")
    if request.get("outcome"):
        return Report("skipped", f"request {request_id} already has outcome {request['outcome']}")
    if tool_args is not None:
        from gate.asking.binding import call_hash

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
    reply = yield from round_trip(exchange)
    if transient(reply):
        yield Pause(BACKOFF_FIRST)
        reply = yield from round_trip(exchange)
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
