"""The fake Anthropic API streams what the real one streams, and notices bad requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_anthropic import API_KEY, MODEL, FakeAnthropic
from tests.support.http import TLS

CAPTURE = Path(__file__).parent / "fixtures" / "anthropic_stream_tool_use.txt"
BASH = {"name": "Bash", "description": "run a command", "input_schema": {"type": "object"}}


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def keys(value: Any) -> Any:
    """The key structure of a JSON value (dicts to their keys, recursively; lists elementwise)."""
    if isinstance(value, dict):
        return {k: keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [keys(v) for v in value]
    return None


def read_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs of an SSE body."""
    events = []
    for frame in text.split("\n\n"):
        if not frame.strip():
            continue
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def ask(fake: FakeAnthropic, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "max_tokens": 1024, "messages": messages, "tools": [BASH], **extra}
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{fake.url}/v1/messages", json=body, headers=headers, timeout=10, verify=TLS)


def test_a_streamed_tool_use_has_the_captured_shapes(fake: FakeAnthropic) -> None:
    captured = [json.loads(line) for line in CAPTURE.read_text().splitlines()]
    call = fake.plan("Bash", {"command": "echo 'a \"quoted\" word'", "description": "say it"})

    response = ask(fake, [{"role": "user", "content": "go"}], stream=True)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    streamed = read_sse(response.text)
    assert all(name == data["type"] for name, data in streamed)
    events = [data for _, data in streamed]
    assert [e["type"] for e in events] == [e["type"] for e in captured]
    for ours, real in zip(events, captured, strict=True):
        assert keys(ours) == keys(real), ours["type"]
    pieces = [e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"]
    assert json.loads("".join(pieces)) == call.input
    assert events[1]["content_block"]["id"] == call.id
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert fake.problems == []


def test_the_tool_result_is_recorded_and_quoted_back(fake: FakeAnthropic) -> None:
    call = fake.plan("Bash", {"command": "true"})
    first = ask(fake, [{"role": "user", "content": "go"}]).json()
    assert first["stop_reason"] == "tool_use"
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "out", "is_error": False}
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": [result]},
    ]

    second = ask(fake, history).json()

    assert second["content"] == [{"type": "text", "text": "The tool call succeeded: out"}]
    assert [(r.tool_use_id, r.text, r.is_error) for r in fake.results_for(call)] == [
        (call.id, "out", False)
    ]
    assert fake.problems == []


def test_a_tool_result_is_answered_with_the_next_planned_call(fake: FakeAnthropic) -> None:
    first = fake.plan("Bash", {"command": "true"})
    second = fake.plan("Bash", {"command": "false"})
    asked = ask(fake, [{"role": "user", "content": "go"}]).json()
    result = {"type": "tool_result", "tool_use_id": first.id, "content": "", "is_error": False}
    history = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": asked["content"]},
        {"role": "user", "content": [result]},
    ]

    then = ask(fake, history).json()

    assert then["stop_reason"] == "tool_use"
    assert [(b["id"], b["input"]) for b in then["content"]] == [(second.id, second.input)]
    assert len(fake.results_for(first)) == 1
    assert fake.problems == []


def test_bad_requests_are_refused_and_recorded(fake: FakeAnthropic) -> None:
    wrong_key = httpx.post(
        f"{fake.url}/v1/messages",
        json={"model": MODEL, "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-api-key": "sk-wrong"},
        verify=TLS,
    )
    no_messages = httpx.post(
        f"{fake.url}/v1/messages",
        json={"model": MODEL, "max_tokens": 1, "messages": []},
        headers={"x-api-key": API_KEY},
        verify=TLS,
    )
    stray = {"type": "tool_result", "tool_use_id": "toolu_never_sent", "content": "?"}
    ask(fake, [{"role": "user", "content": [stray]}])
    fake.plan("Write", {"file_path": "/tmp/x", "content": ""})
    ask(fake, [{"role": "user", "content": "go"}])  # only Bash is offered

    assert wrong_key.status_code == 401
    assert wrong_key.json()["error"]["type"] == "authentication_error"
    assert no_messages.status_code == 400
    assert no_messages.json()["error"]["type"] == "invalid_request_error"
    assert fake.problems == [
        "/v1/messages: wrong or missing API key",
        "/v1/messages: messages must be a non-empty list",
        "a tool_result for unknown id toolu_never_sent",
        "planned Write but the CLI offers ['Bash']",
    ]
