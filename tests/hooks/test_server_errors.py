"""A server that fails or answers garbage is a deny of its own, never "no decision", with or
without --fail-open: the real `gate hook` against a loopback server that answers on command
(and checks what the hook sends)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gate.asking.toolcall import Call, Verdict
from gate.client import GateClient, HookContext, PreToolUseHook
from gate.mcp.asking import Asker
from tests.hooks.conftest import run_hook
from tests.hooks.test_claude_code import RM, fresh
from tests.support import config as cfg
from tests.support.servers import ThreadServer, free_port

PENDING = {
    "id": "01JBROKEN",
    "status": "pending",
    "tool_name": "Bash",
    "args_hash": "0" * 64,
}
ASK = {"decision": "ask", "rule": "risky-bash", "reason": "x", "request": PENDING}
HTML = "<!doctype html><title>Sign in</title><p>Please log in"


@dataclass
class Answer:
    status: int
    body: str
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class BrokenGate:
    """Answers each route from a script (the last answer repeats); records what it got."""

    answers: dict[str, list[Answer]]
    received: list[tuple[str, str, Any, str | None]] = field(default_factory=list)

    async def handle(self, request: Request) -> Response:
        route = f"{request.method} {request.url.path}"
        raw = await request.body()
        body = json.loads(raw) if raw else None
        self.received.append(
            (route, str(request.url.query), body, request.headers.get("authorization"))
        )
        key = next((k for k in self.answers if route.startswith(k)), None)
        if key is None:
            return Response("no such route", 404, media_type="text/plain")
        script = self.answers[key]
        answer = script.pop(0) if len(script) > 1 else script[0]
        return Response(
            answer.body, answer.status, headers=answer.headers, media_type=answer.content_type
        )

    def routes(self) -> list[str]:
        return [r[0] for r in self.received]


@pytest.fixture
def broken() -> Iterator[tuple[BrokenGate, str]]:
    fake = BrokenGate({})
    app = Starlette(
        routes=[Route("/{path:path}", fake.handle, methods=["GET", "POST"])],
    )
    with ThreadServer(app) as server:
        yield fake, server.url


def deny_reason(out: Any) -> str:
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny", out
    reason: str = out["hookSpecificOutput"]["permissionDecisionReason"]
    return reason


FAIL_OPEN = [pytest.param([], id="default"), pytest.param(["--fail-open"], id="fail-open")]


@pytest.mark.parametrize("flags", FAIL_OPEN)
def test_a_500_when_asking_is_a_deny_saying_the_server_failed(
    broken: tuple[BrokenGate, str], flags: list[str]
) -> None:
    fake, url = broken
    fake.answers["POST /v1/gate"] = [
        Answer(500, json.dumps({"error": {"code": "internal", "message": "request 7f3a failed"}}))
    ]

    code, out, _ = run_hook(url, fresh("bash", tool_input=RM), *flags)

    assert code == 0
    assert deny_reason(out) == (
        f"gate: The approval server at {url} failed (HTTP 500 internal: request 7f3a failed), so "
        "this Bash call was blocked to be safe. Nobody approved it. Tell the user the gate server "
        "is failing and needs fixing; a failing gate never lets calls through, not even with "
        "--fail-open."
    )
    # Retried like a restart blip (same key, so harmless), then given up.
    assert fake.routes() == ["POST /v1/gate"] * 3
    keys = {r[2]["idempotency_key"] for r in fake.received}
    assert len(keys) == 1
    assert {r[3] for r in fake.received} == {f"Bearer {cfg.AGENT}"}


@pytest.mark.parametrize("flags", FAIL_OPEN)
@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (
            Answer(200, HTML, "text/html"),
            f"(HTTP 200, the reply is not JSON (text/html, {len(HTML)} bytes))",
        ),
        (Answer(200, '["yes"]'), "(HTTP 200, not a JSON object)"),
        (Answer(200, '{"decision": "sure"}'), "(HTTP 200, not a gate answer)"),
        (Answer(302, "", "text/html"), "(HTTP 302)"),
        (
            Answer(404, HTML, "text/html"),
            f"(HTTP 404, the reply is not JSON (text/html, {len(HTML)} bytes))",
        ),
    ],
    ids=["html-login-page", "json-array", "unknown-decision", "redirect", "html-404"],
)
def test_an_answer_that_is_not_gates_is_a_deny_saying_so(
    broken: tuple[BrokenGate, str], flags: list[str], answer: Answer, says: str
) -> None:
    fake, url = broken
    fake.answers["POST /v1/gate"] = [answer]

    code, out, _ = run_hook(url, fresh("bash", tool_input=RM), *flags)

    reason = deny_reason(out)
    assert code == 0
    assert reason.startswith(f"gate: The server at {url} answered with something that is not a ")
    assert says in reason
    assert "Sign in" not in reason  # what a stranger's page says never reaches the model
    assert reason.endswith("not a proxy, login page or another service.")


@pytest.mark.parametrize("flags", FAIL_OPEN)
def test_garbage_in_the_middle_of_the_wait_is_a_deny(
    broken: tuple[BrokenGate, str], flags: list[str]
) -> None:
    fake, url = broken
    fake.answers["POST /v1/gate"] = [Answer(200, json.dumps(ASK))]
    fake.answers["GET /v1/requests/01JBROKEN/wait"] = [Answer(200, HTML, "text/html")]

    code, out, _ = run_hook(url, fresh("bash", tool_input=RM), "--format", "command", *flags)

    assert code == 2
    assert out["continue"] is False
    assert "answered with something that is not a gate answer" in out["reason"]
    assert fake.routes() == ["POST /v1/gate", "GET /v1/requests/01JBROKEN/wait"]


def test_a_server_failing_until_the_deadline_is_a_deny_naming_the_request(
    broken: tuple[BrokenGate, str],
) -> None:
    fake, url = broken
    fake.answers["POST /v1/gate"] = [Answer(200, json.dumps(ASK))]
    fake.answers["GET /v1/requests/01JBROKEN/wait"] = [Answer(503, HTML, "text/html")]
    fake.answers["POST /v1/requests/01JBROKEN/cancel"] = [Answer(503, HTML, "text/html")]

    code, out, _ = run_hook(url, fresh("bash", tool_input=RM), "--timeout", "2", "--fail-open")

    assert code == 0
    assert deny_reason(out) == (
        f"gate: The approval server at {url} failed (HTTP 503, the reply is not JSON (text/html, "
        f"{len(HTML)} bytes)) while the hook waited for a decision on request 01JBROKEN, until "
        "its 2 s limit, so this Bash call was blocked to be safe. Nobody approved it. Tell the "
        "user the gate server is failing and needs fixing; a failing gate never lets calls "
        "through, not even with --fail-open."
    )
    # It kept trying through the outage, then tried to withdraw the request.
    assert fake.routes().count("GET /v1/requests/01JBROKEN/wait") > 2
    assert fake.routes()[-1] == "POST /v1/requests/01JBROKEN/cancel"
    # The deadline it sent: under its own 2 s.
    assert 0 < fake.received[0][2]["expires_in"] <= 2


def test_fail_open_still_opens_for_a_gate_that_cannot_be_reached() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    closed = run_hook(url, fresh("bash", tool_input=RM))
    opened = run_hook(url, fresh("bash", tool_input=RM), "--fail-open")

    assert "could not be reached (connection refused)" in deny_reason(closed[1])
    assert (opened[0], opened[1]) == (0, None)
    assert "gate is unreachable and --fail-open is set; NOT blocking this call" in opened[2]


#: answers no gate gives and no JSON reader takes: a body its Content-Encoding does not
#: decode, and JSON nested deeper than Python's parser recurses
UNREADABLE = [
    pytest.param(Answer(200, "{}", headers={"content-encoding": "gzip"}), id="bad-gzip"),
    pytest.param(Answer(200, "[" * 100_000 + "]" * 100_000), id="too-deep"),
]


@pytest.mark.parametrize("answer", UNREADABLE)
def test_an_unreadable_answer_is_a_deny_from_the_sdk_never_an_exception(
    broken: tuple[BrokenGate, str], answer: Answer
) -> None:
    # The SDK returned a Verdict for every reply it could read and raised the reader's own
    # exception (httpx.DecodingError, RecursionError) for these: a framework that logs hook
    # errors and goes on would run the call. A reply that came but cannot be read is not
    # "unreachable" either: --fail-open does not open for it.
    fake, url = broken
    fake.answers["POST /v1/gate"] = [Answer(200, json.dumps(ASK))]
    fake.answers["GET /v1/requests/01JBROKEN/wait"] = [answer]
    with GateClient(url, cfg.AGENT, timeout=5) as client:
        verdict = client.check("Bash", RM)
        result = PreToolUseHook(client, fail_open=True)(HookContext("Bash", RM))
    assert (verdict.allowed, verdict.kind) == (False, "garbled")
    assert "answered with something that is not a gate answer" in verdict.reason
    assert result.allow is False

    fake.answers["POST /v1/gate"] = [answer]
    with GateClient(url, cfg.AGENT, timeout=5) as client:
        asked = client.check("Bash", RM)
    assert (asked.allowed, asked.kind) == (False, "garbled")


@pytest.mark.parametrize("answer", UNREADABLE)
def test_an_unreadable_answer_is_a_deny_from_the_async_sdk_and_mcp(
    broken: tuple[BrokenGate, str], answer: Answer
) -> None:
    fake, url = broken
    fake.answers["POST /v1/gate"] = [answer]

    async def ask() -> tuple[Verdict, Verdict]:
        async with GateClient(url, cfg.AGENT, timeout=5) as client:
            sdk = await client.check_async("Bash", RM)
        asker = Asker(url, cfg.AGENT)
        try:
            mcp = await asker.ask(Call("mcp__files__Bash", RM, idempotency_key="k1"), limit=5)
        finally:
            await asker.aclose()
        return sdk, mcp

    for verdict in anyio.run(ask):
        assert (verdict.allowed, verdict.kind) == (False, "garbled")


def test_an_answer_nested_too_deeply_is_a_deny_from_the_hook_saying_so(
    broken: tuple[BrokenGate, str],
) -> None:
    fake, url = broken
    fake.answers["POST /v1/gate"] = [Answer(200, "[" * 100_000 + "]" * 100_000)]

    code, out, _ = run_hook(url, fresh("bash", tool_input=RM), "--fail-open")

    reason = deny_reason(out)
    assert code == 0
    assert "answered with something that is not a gate answer" in reason
    assert "RecursionError" not in reason
