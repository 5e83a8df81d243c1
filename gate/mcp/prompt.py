"""`gate mcp prompt`: Claude Code's permission-prompt tool, answered by gate.

Headless Claude Code (`claude -p`, the Agent SDK) cannot show its permission dialog; given
`--permission-prompt-tool mcp__gate__approve` it calls this server's `approve` tool instead,
with `{tool_name, input, tool_use_id?}`, and reads the first text content of the result as
JSON: `{"behavior": "allow", "updatedInput": {...}}` runs the call with `updatedInput` (the
approver's edits, else the input as sent), `{"behavior": "deny", "message": "..."}` refuses it
and shows the message to the model. The message is the wording `gate hook` gives.

The asking is `gate.asking.askflow.decide()` (see `gate.mcp.asking`): policy, long-poll, reconnects,
the `--timeout` deadline, withdrawal, and the check that an approval is bound to exactly this
call. Anything that is not a yes is a deny; so is a failure of this server itself.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from gate.asking.toolcall import Verdict, derived_key
from gate.asking.wording import clip
from gate.mcp.asking import Asker
from gate.mcp.serving import Options, make_call, serve_stdio, token_hint, warn
from gate.mcp.tasks import Progress, Tasks

TOOL = "approve"
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool_name": {"type": "string", "description": "The tool Claude Code wants to run"},
        "input": {"type": "object", "description": "The tool's input"},
        "tool_use_id": {"type": "string", "description": "The tool call's id"},
    },
    "required": ["tool_name", "input"],
}
#: why a request is withdrawn when the client cancels the call or goes away
CANCELLED = "Claude Code cancelled the permission request or disconnected"
DESCRIPTION = (
    "Ask gate (human approval) whether Claude Code may run a tool call. Answers "
    '{"behavior": "allow", "updatedInput": {...}} or {"behavior": "deny", "message": "..."}.'
)


def answer(verdict: Verdict, tool_input: dict[str, Any], on_no_rule: str) -> dict[str, Any]:
    """The permission-prompt answer for a verdict: allow with the input to run, or deny."""
    if verdict.allowed or (verdict.kind == "no_rule" and on_no_rule == "allow"):
        edited = verdict.updated_args
        return {"behavior": "allow", "updatedInput": edited if edited is not None else tool_input}
    return {"behavior": "deny", "message": clip(verdict.reason)}


def build_server(opts: Options, asker: Asker, tasks: Tasks | None = None) -> Server[Any]:
    """The MCP server: one tool, `approve` (callable as an MCP task when `tasks` is given)."""
    # Every tool_use_id this server was asked about. Claude Code asks once per call; the
    # same id asked again is a replay, and an approval found again by its key would let
    # the call run twice on one person's yes (the hook's outcome report, which spends an
    # approval on the server, never runs for a permission-prompt call).
    asked: set[str] = set()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tool = types.Tool(name=TOOL, description=DESCRIPTION, input_schema=INPUT_SCHEMA)
        return types.ListToolsResult(tools=[Tasks.offered(tool) if tasks else tool])

    async def run_call(
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        report: Progress,
        cancelled_because: str,
    ) -> types.CallToolResult:
        if params.name != TOOL:
            return _text({"error": f"unknown tool {params.name!r}: this server has {TOOL!r}"}, True)
        try:
            decision = await _decide(
                opts, asker, ctx, params.arguments or {}, asked, report, cancelled_because
            )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # fail closed on our own bugs too, never a traceback
            warn(f"gate mcp prompt: {exc!r}")
            decision = {
                "behavior": "deny",
                "message": f"gate: The gate permission tool failed ({exc!r}), so the call was "
                "blocked. Nobody reviewed it.",
            }
        return _text(decision)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await run_call(ctx, params, ctx.session.report_progress, CANCELLED)

    server: Server[Any] = Server(
        "gate",
        version="1",
        instructions="Human approval for tool calls (Claude Code --permission-prompt-tool).",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    if tasks is not None:
        tasks.install(server, run_call)
    return server


async def _decide(
    opts: Options,
    asker: Asker,
    ctx: ServerRequestContext[Any],
    arguments: dict[str, Any],
    asked: set[str],
    report: Progress,
    cancelled_because: str,
) -> dict[str, Any]:
    tool_name = arguments.get("tool_name")
    tool_input = arguments.get("input")
    tool_use_id = arguments.get("tool_use_id")
    problem = None
    if not isinstance(tool_name, str) or not tool_name:
        problem = "no tool_name"
    elif not isinstance(tool_input, dict):
        problem = "input is not a JSON object"
    elif tool_use_id is not None and (not isinstance(tool_use_id, str) or not tool_use_id):
        problem = "tool_use_id is not a string"
    if problem is not None:
        return {
            "behavior": "deny",
            "message": f"gate: The permission request could not be read ({problem}), so the "
            "call was blocked to be safe. Nobody reviewed it.",
        }
    assert isinstance(tool_name, str) and isinstance(tool_input, dict)
    if tool_use_id in asked:
        return _replayed(tool_use_id)
    if tool_use_id:
        asked.add(tool_use_id)
        key, derived = tool_use_id, False
    else:
        # No call id: the same call asked again finds its earlier request; a finished one is
        # asked about afresh under a new key (see gate.asking.toolcall.Call.derived_key).
        key, derived = derived_key("cc-prompt", None, tool_name, tool_input), True
    context = _context(ctx, tool_use_id)
    call = make_call(
        opts,
        tool_name=tool_name,
        tool_args=tool_input,
        key=key,
        derived=derived,
        agent_id=opts.agent_id,
        session_id=None,
        context=context,
    )

    async def beat(waited: float, message: str) -> None:
        await report(waited, opts.timeout, message)

    verdict = await asker.ask(
        call,
        limit=opts.timeout,
        beat=beat,
        beat_every=opts.beat_every,
        cancelled_because=cancelled_because,
    )
    return answer(verdict, tool_input, opts.on_no_rule)


def _context(ctx: ServerRequestContext[Any], tool_use_id: str | None) -> dict[str, Any]:
    """The call's context: where it came from, and the agent's id of it (its spans carry it)."""
    client = ctx.session.client_params.client_info if ctx.session.client_params else None
    context: dict[str, Any] = {"source": "claude-code-permission-prompt"}
    if client is not None:
        context["mcp_client"] = f"{client.name} {client.version}".strip()
    if tool_use_id:
        context["tool_call_id"] = tool_use_id
    return context


def _replayed(tool_use_id: str) -> dict[str, Any]:
    """The answer to a tool_use_id asked about before: refused, whatever the first answer."""
    return {
        "behavior": "deny",
        "message": f"gate: The tool call id {tool_use_id!r} was already asked about, so this "
        "call was blocked: one approval runs a call once. Nobody approved it again.",
    }


def _text(body: dict[str, Any], is_error: bool = False) -> types.CallToolResult:
    text = json.dumps(body, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def run(ns: argparse.Namespace) -> int:
    """`gate mcp prompt`: serve over stdio until the client disconnects."""
    opts = Options(ns)
    problem = opts.problem()
    if problem is not None:
        warn(f"gate mcp prompt: {problem}")
        return 1
    return anyio.run(_main, opts)


async def _main(opts: Options) -> int:
    asker = Asker(opts.gate_url, opts.token, token_hint=token_hint())
    tasks = Tasks("gate mcp prompt")
    server = build_server(opts, asker, tasks)
    init = server.create_initialization_options()
    init = init.model_copy(
        update={"capabilities": init.capabilities.model_copy(update={"tasks": tasks.capability()})}
    )
    try:
        await serve_stdio(server, init, asker, "gate mcp prompt", tasks)
    finally:
        with anyio.CancelScope(shield=True):
            await asker.aclose()
    return 0
