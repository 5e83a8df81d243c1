"""A fake Anthropic Messages API on loopback: the real Claude Code CLI talks to it in tests.

It plays a scripted model. `POST /v1/messages` answers a conversation that offers tools with
the next planned `tool_use` block; once the CLI sends that call's `tool_result` back, it
answers with the next planned call, so one session can carry several calls in turn, and after
the last one with a short text quoting its result. Requests without tools (titles, summaries,
other side questions the CLI asks a small model) get a short text. `"stream": true` requests
are answered with server-sent events in the shapes of a captured real stream
(`tests/e2e/fixtures/anthropic_stream_tool_use.txt`, source in its SOURCES.md): `message_start`,
`content_block_start`, `ping`, `content_block_delta` (`text_delta` / `input_json_delta` in
pieces), `content_block_stop`, `message_delta` (with `stop_reason`), `message_stop`.

It checks what it receives and records what does not hold in `problems` (answered with
Anthropic's error body and status): the API key the test configured, a JSON body with
`model`, `max_tokens` and a non-empty `messages` list, tools with a name and an input schema,
a planned call only when the CLI offers that tool, and `tool_result` blocks only for a
`tool_use` it sent. Every request is recorded in `received`; `count_tokens` gets an estimate,
any other path a 404 (both logged), so a test sees what else the CLI asked for.

What it cannot check: how a real model would react to a reason, and requests the CLI sends to
hosts other than ANTHROPIC_BASE_URL (the tests give it no network for those).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import LoopbackFake

API_KEY = "sk-ant-api03-fake-key-for-loopback-tests"
MODEL = "claude-sonnet-4-5-20250929"


@dataclass
class Received:
    """One request the fake received (credentials left out)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int


@dataclass
class ToolResult:
    """A `tool_result` block the CLI sent back: what the model was told about a tool call."""

    tool_use_id: str
    text: str
    is_error: bool


@dataclass
class PlannedCall:
    """A tool call the fake model will make, and the id it goes out with."""

    name: str
    input: dict[str, Any]
    id: str


@dataclass
class _Script:
    planned: list[PlannedCall] = field(default_factory=list)
    sent: dict[str, PlannedCall] = field(default_factory=dict)


class FakeAnthropic(LoopbackFake):
    """The fake's state and its ASGI app; `start()` serves it on 127.0.0.1:<free port>."""

    def __init__(self, api_key: str = API_KEY) -> None:
        self.api_key = api_key
        self.received: list[Received] = []
        self.problems: list[str] = []
        self.results: list[ToolResult] = []
        self._script = _Script()
        self._lock = threading.Lock()
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self._count_tokens, methods=["POST"]),
                Route("/{rest:path}", self._other, methods=["GET", "POST", "HEAD", "PUT"]),
            ]
        )

    # -- control --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.base_url

    def plan(
        self, name: str, tool_input: dict[str, Any], *, call_id: str | None = None
    ) -> PlannedCall:
        """The model's next turn in a conversation with tools is this tool call.

        Ids are unique like the real API's unless `call_id` says otherwise (a model, or a
        hostile agent, that reuses one).
        """
        call = PlannedCall(name, tool_input, call_id or f"toolu_01{uuid.uuid4().hex[:22]}")
        with self._lock:
            self._script.planned.append(call)
        return call

    def results_for(self, call: PlannedCall) -> list[ToolResult]:
        """The tool_result blocks the CLI sent back for `call`."""
        with self._lock:
            return [r for r in self.results if r.tool_use_id == call.id]

    def agent_requests(self) -> list[dict[str, Any]]:
        """Bodies of the agent loop's `POST /v1/messages` (the ones offering tools)."""
        with self._lock:
            return [
                r.body
                for r in self.received
                if r.path == "/v1/messages" and isinstance(r.body, dict) and r.body.get("tools")
            ]

    # -- the API --------------------------------------------------------------------------

    async def _messages(self, request: Request) -> Response:
        body, problem = await self._read(request, ("model", "max_tokens", "messages"))
        if problem is None:
            problem = _tools_problem(body.get("tools"))
        if problem:
            return self._refuse(request, body, problem)
        tools = body.get("tools") or []
        blocks = self._turn(body, tools) if tools else [_text("Fake model: ok.")]
        self._record(request, body, 200)
        message = _message(f"msg_01{uuid.uuid4().hex[:22]}", body["model"], blocks)
        if body.get("stream"):
            return StreamingResponse(_events(message), media_type="text/event-stream")
        return JSONResponse(message)

    async def _count_tokens(self, request: Request) -> Response:
        body, problem = await self._read(request, ("model", "messages"))
        if problem:
            return self._refuse(request, body, problem)
        self._record(request, body, 200)
        # Roughly four characters a token: a plausible count, nothing depends on it.
        return JSONResponse({"input_tokens": len(json.dumps(body)) // 4})

    async def _other(self, request: Request) -> Response:
        raw = await request.body()
        self._record(request, raw.decode(errors="replace"), 404)
        return _error(404, "not_found_error", f"{request.url.path} is not part of this fake")

    # -- the scripted model ---------------------------------------------------------------

    def _turn(self, body: dict[str, Any], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Make the next planned call; with none left, quote the tool result just received."""
        answered = self._tool_results(body)
        offered = {t["name"] for t in tools}
        with self._lock:
            call = self._script.planned.pop(0) if self._script.planned else None
            if call is None:
                if answered:
                    last = answered[-1]
                    verdict = "failed" if last.is_error else "succeeded"
                    return [_text(f"The tool call {verdict}: {last.text}")]
                return [_text("Nothing to do.")]
            if call.name not in offered:
                self.problems.append(f"planned {call.name} but the CLI offers {sorted(offered)}")
                return [_text(f"{call.name} is not available.")]
            self._script.sent.setdefault(call.id, call)
        return [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}]

    def _tool_results(self, body: dict[str, Any]) -> list[ToolResult]:
        """tool_result blocks in the newest user message (what the model hears back now)."""
        last = body["messages"][-1]
        content = last.get("content") if isinstance(last, dict) else None
        if not isinstance(content, list) or last.get("role") != "user":
            return []
        found: list[ToolResult] = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            result = ToolResult(
                tool_use_id=str(block.get("tool_use_id")),
                text=_text_of(block.get("content")),
                is_error=bool(block.get("is_error")),
            )
            with self._lock:
                if result.tool_use_id not in self._script.sent:
                    self.problems.append(f"a tool_result for unknown id {result.tool_use_id}")
                self.results.append(result)
            found.append(result)
        return found

    # -- checks ---------------------------------------------------------------------------

    async def _read(self, request: Request, need: tuple[str, ...]) -> tuple[Any, str | None]:
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        key = request.headers.get("x-api-key") or bearer
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace"), "the body is not JSON"
        if key != self.api_key:
            return body, "wrong or missing API key"
        if not isinstance(body, dict):
            return body, "the body is not a JSON object"
        missing = [k for k in need if k not in body]
        if missing:
            return body, f"missing {', '.join(missing)}"
        if not isinstance(body["messages"], list) or not body["messages"]:
            return body, "messages must be a non-empty list"
        return body, None

    def _refuse(self, request: Request, body: Any, problem: str) -> Response:
        status = 401 if "API key" in problem else 400
        with self._lock:
            self.problems.append(f"{request.url.path}: {problem}")
        self._record(request, body, status)
        kind = "authentication_error" if status == 401 else "invalid_request_error"
        return _error(status, kind, problem)

    def _record(self, request: Request, body: Any, status: int) -> None:
        secret = ("x-api-key", "authorization")
        headers = {k: v for k, v in request.headers.items() if k not in secret}
        with self._lock:
            self.received.append(Received(request.method, request.url.path, headers, body, status))


def _tools_problem(tools: Any) -> str | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools must be a list"
    for tool in tools:
        # Server tools (web search and the like) carry a `type` instead of an input schema.
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            return "a tool without a name"
        if "input_schema" not in tool and "type" not in tool:
            return f"tool {tool['name']} has no input_schema"
    return None


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _text_of(content: Any) -> str:
    """A tool_result's content as plain text (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [b.get("text", "") for b in content if isinstance(b, dict)]
        return "\n".join(str(t) for t in texts if t)
    return ""


def _usage(output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": 100,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def _message(message_id: str, model: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {
        "model": model,
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _usage(20),
    }


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event as the API frames it: `event: <type>`, `data: <json>`, blank line."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def stream_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The events that stream `message`, in the order and shapes of the captured stream."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = _usage(1)
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opening = {**block, "input": {}}
            events.append({"type": "content_block_start", "index": index, "content_block": opening})
            text = json.dumps(block["input"])
            # The arguments arrive in pieces (the first one empty, a ping among them), as from
            # the real API: the CLI must join them.
            cut = len(text) // 2
            pieces = [{"type": "input_json_delta", "partial_json": p} for p in ("", text[:cut])]
            events += [{"type": "content_block_delta", "index": index, "delta": pieces[0]}]
            events += [{"type": "ping"}]
            events += [{"type": "content_block_delta", "index": index, "delta": pieces[1]}]
            last = {"type": "input_json_delta", "partial_json": text[cut:]}
            events.append({"type": "content_block_delta", "index": index, "delta": last})
        else:
            opening = {"type": "text", "text": ""}
            events.append({"type": "content_block_start", "index": index, "content_block": opening})
            delta = {"type": "text_delta", "text": block["text"]}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    usage = {
        k: v for k, v in message["usage"].items() if k not in ("cache_creation", "service_tier")
    }
    end = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append({"type": "message_delta", "delta": end, "usage": usage})
    events.append({"type": "message_stop"})
    return events


async def _events(message: dict[str, Any]) -> AsyncIterator[bytes]:
    for event in stream_events(message):
        yield sse(event)


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse(
        {"type": "error", "error": {"type": kind, "message": message}}, status_code=status
    )
