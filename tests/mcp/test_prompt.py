"""`gate mcp prompt`: the real permission-prompt server, called by the official SDK client the
way Claude Code calls `--permission-prompt-tool mcp__gate__approve`, against a real gate."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import pytest_asyncio

from tests.mcp.conftest import (
    PROMPT,
    SHARED_LOOP,
    Live,
    Shared,
    Turn,
    gate_env,
    mcp_client,
    running,
    shared_session,
    unique,
)
from tests.support.servers import free_port

#: what Claude Code sends and accepts (with its source): see fixtures/permission_prompt_tool.json
SHAPE = json.loads((Path(__file__).parent / "fixtures" / "permission_prompt_tool.json").read_text())
JSON_TYPES = {"string": str, "object": dict, "array": list, "boolean": bool}

# The tests that only make calls and read results take turns on one prompt session (the
# `prompt` fixture, on the module's event loop: SHARED_LOOP), or on one with other options
# (`strict_prompt`); the others start their own.


def decision(result: types.CallToolResult) -> dict[str, Any]:
    """The permission decision as Claude Code reads it: JSON in the first text content."""
    assert not result.is_error
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    body: dict[str, Any] = json.loads(first.text)
    behavior = body.get("behavior")
    assert behavior in ("allow", "deny"), body
    shape = SHAPE["result_text_json"][behavior]
    for key, want in shape["required"].items():
        assert key in body, f"{behavior} answer without {key}: {body}"
        if want in JSON_TYPES:
            assert isinstance(body[key], JSON_TYPES[want]), (key, body)
        else:
            assert body[key] == want
    assert set(body) <= set(shape["required"]) | set(shape["optional"]), body
    return body


async def approve_call(session: Any, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return decision(await session.call_tool("approve", arguments, **kw))


@SHARED_LOOP
async def test_one_tool_named_approve_with_claude_codes_input(prompt: Turn) -> None:
    s = prompt.session
    tools = (await s.list_tools()).tools
    init = s.initialize_result
    assert init is not None and init.server_info.name == "gate"
    assert [t.name for t in tools] == ["approve"]
    schema = tools[0].input_schema
    assert set(schema["required"]) == set(SHAPE["call_arguments"]["required"])
    assert set(schema["properties"]) == set(SHAPE["call_arguments"]["required"]) | set(
        SHAPE["call_arguments"]["optional"]
    )


@SHARED_LOOP
async def test_policy_allow_answers_allow_with_the_input_as_sent(prompt: Turn) -> None:
    tool_input = {"path": unique("/etc/app.conf")}
    s = prompt.session
    body = await approve_call(s, {"tool_name": "read_config", "input": tool_input})
    assert body == {"behavior": "allow", "updatedInput": tool_input}


@SHARED_LOOP
async def test_policy_deny_answers_deny_with_the_hooks_wording(prompt: Turn) -> None:
    arguments = {"tool_name": "db_write", "input": {"env": "prod", "sql": unique("DELETE")}}
    s = prompt.session
    body = await approve_call(s, arguments)
    assert set(body) == {"behavior", "message"}
    assert body["message"].startswith(
        "gate: Blocked by rule 'deny-prod-writes': No writes to prod from agents."
    )


@SHARED_LOOP
async def test_approval_with_edits_allows_the_edited_input(live: Live, prompt: Turn) -> None:
    command = unique("rm -rf build")
    tool_use_id = unique("toolu_01")
    arguments = {**SHAPE["example_call"], "tool_use_id": tool_use_id}
    arguments["input"] = {"command": command, "description": "Clean the build"}
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    edited = {"command": "rm -rf build/tmp", "description": "Clean the build"}
    s = prompt.session
    async with running(approve_call(s, arguments, progress_callback=on_progress)) as box:
        request = await live.pending("Bash", command=command)
        with anyio.fail_after(20):
            while len(progress) < 2:
                await anyio.sleep(0.05)
        await live.decide(request["id"], "approve", comment="only tmp", edited_args=edited)
    assert box[0] == {"behavior": "allow", "updatedInput": edited}
    assert request["rule"] == "risky-bash"
    # a beat may come while the ask is in flight ("the request"); once asked, each names it
    assert all(m and m.startswith("Waiting for approval in gate") for m in progress)
    assert request["id"] in str(progress[-1])
    # Claude Code's tool_use_id is the request's idempotency key, as with `gate hook`
    async with live.api() as c:
        found = (await c.get("/v1/requests", params={"idempotency_key": tool_use_id})).json()
    assert [r["id"] for r in found["items"]] == [request["id"]]


@SHARED_LOOP
async def test_rejection_denies_with_the_approvers_comment(live: Live, prompt: Turn) -> None:
    command = unique("rm -rf /srv")
    s = prompt.session
    async with running(
        approve_call(s, {"tool_name": "Bash", "input": {"command": command}})
    ) as box:
        request = await live.pending("Bash", command=command)
        await live.decide(request["id"], "reject", comment="never on /srv")
    assert box[0]["behavior"] == "deny"
    assert "never on /srv" in box[0]["message"]
    assert "A person reviewed this Bash call and said no" in box[0]["message"]


@SHARED_LOOP
async def test_no_rule_asks_a_person_by_default(live: Live, prompt: Turn) -> None:
    pattern = unique("**/*.secret")
    s = prompt.session
    async with running(
        approve_call(s, {"tool_name": "Glob", "input": {"pattern": pattern}})
    ) as box:
        request = await live.pending("Glob", pattern=pattern)
        await live.decide(request["id"], "approve")
    assert box[0] == {"behavior": "allow", "updatedInput": {"pattern": pattern}}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_strict_prompt(
    live: Live, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Shared]:
    """A prompt with `--on-no-rule deny --timeout 1`, for two tests marked SHARED_LOOP: one
    asks about a tool no rule covers (only --on-no-rule matters), the other about one a rule
    holds for a person (only --timeout matters)."""
    args = [*PROMPT, "--on-no-rule", "deny", "--timeout", "1"]
    async with shared_session(args, live.url, tmp_path_factory.mktemp("strict")) as shared:
        yield shared


@pytest.fixture
def strict_prompt(shared_strict_prompt: Shared) -> Turn:
    """This test's turn on the module's `--on-no-rule deny --timeout 1` prompt."""
    return shared_strict_prompt.turn()


@SHARED_LOOP
async def test_no_rule_with_on_no_rule_deny_denies_without_asking(
    live: Live, strict_prompt: Turn
) -> None:
    pattern = unique("*.md")
    s = strict_prompt.session
    body = await approve_call(s, {"tool_name": "Glob", "input": {"pattern": pattern}})
    assert body == {"behavior": "deny", "message": "gate: No rule covers this Glob call."}
    assert await live.find("Glob", pattern=pattern) == []


async def test_gate_down_denies(live: Live) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    async with mcp_client(PROMPT, gate_env(down)) as s:
        body = await approve_call(s, {"tool_name": "read_config", "input": {"path": "/x"}})
    assert body["behavior"] == "deny"
    assert f"The approval server at {down} could not be reached" in body["message"]


@SHARED_LOOP
async def test_unreadable_arguments_deny(prompt: Turn) -> None:
    s = prompt.session
    no_name = await approve_call(s, {"input": {"command": "ls"}})
    not_object = await approve_call(s, {"tool_name": "Bash", "input": "rm -rf /"})
    bad_id = await approve_call(s, {"tool_name": "Bash", "input": {}, "tool_use_id": 7})
    other = await s.call_tool("not-approve", {})
    assert "(no tool_name)" in no_name["message"]
    assert "(input is not a JSON object)" in not_object["message"]
    assert "(tool_use_id is not a string)" in bad_id["message"]
    assert all(b["behavior"] == "deny" for b in (no_name, not_object, bad_id))
    assert other.is_error


@SHARED_LOOP
async def test_own_deadline_denies_and_nobody_is_left_deciding(
    live: Live, strict_prompt: Turn
) -> None:
    command = unique("rm -rf cache")
    s = strict_prompt.session
    body = await approve_call(s, {"tool_name": "Bash", "input": {"command": command}})
    assert body["behavior"] == "deny" and "No human rejected it" in body["message"]
    (request,) = await live.find("Bash", command=command)
    assert (await live.settled(request["id"]))["status"] in ("cancelled", "expired")


@SHARED_LOOP
async def test_cancelled_permission_request_is_withdrawn(live: Live, prompt: Turn) -> None:
    command = unique("rm -rf dist")
    s = prompt.session
    async with anyio.create_task_group() as tg:
        tg.start_soon(s.call_tool, "approve", {"tool_name": "Bash", "input": {"command": command}})
        request = await live.pending("Bash", command=command)
        tg.cancel_scope.cancel()
    done = await live.settled(request["id"])
    assert done["status"] == "cancelled"
    assert "Claude Code cancelled the permission request" in (done["reason"] or "")


# A tool_use_id is answered once: the same id asked again is refused, never allowed on the
# approval the first ask got (the call would run twice on one person's yes).
@SHARED_LOOP
async def test_a_reused_tool_use_id_is_refused_after_its_approval(live: Live, prompt: Turn) -> None:
    command = unique("rm -rf build")
    arguments = {
        "tool_name": "Bash",
        "input": {"command": command},
        "tool_use_id": unique("toolu_replay"),
    }
    s = prompt.session
    async with running(approve_call(s, arguments)) as box:
        request = await live.pending("Bash", command=command)
        await live.decide(request["id"], "approve")
    assert box[0] == {"behavior": "allow", "updatedInput": arguments["input"]}

    again = await approve_call(s, arguments)

    assert again["behavior"] == "deny"
    assert "was already asked about" in again["message"]
    async with live.api() as c:  # nobody was asked again, and nothing new was stored
        found = await c.get("/v1/requests", params={"idempotency_key": arguments["tool_use_id"]})
    assert [r["id"] for r in found.json()["items"]] == [request["id"]]
