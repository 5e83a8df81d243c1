"""`gate mcp proxy`: gate every tool call of any MCP server, for any MCP client.

To its client (Claude Desktop, Cursor, VS Code, ...) this is an MCP server over stdio that
looks like the upstream one: the same server info, instructions and capabilities, and every
request (tools/list, resources, resource templates, prompts, completion, logging level) and
every upstream notification passed through with the SDK's own types. The exception is
`tools/call`: first it is asked about, through `POST /v1/gate`, as tool `mcp__NAME__TOOL`
(the name Claude Code gives the same tool, so one rule covers both):

* allow (a rule, a grant, a person's approval bound to this exact call) -> forwarded, with the
  approver's edited arguments if they edited them; the outcome (`ran`, or `failed` when the
  result is an error or the upstream fails) is recorded once the upstream answers;
* deny, reject, expiry, withdrawal, gate unreachable or failing, a bad token, an approval not
  bound to this call, this proxy's `--timeout` -> not forwarded: a tool result with
  `isError: true` whose text is the reason, written for the model (`gate hook`'s wording);
* no rule -> forwarded (`--on-no-rule allow`, the default), asked (`ask`) or refused (`deny`).

Only a tool the upstream listed is asked about or forwarded, by exactly the name it listed
(`gate.mcp.listing`): any other name is refused with a JSON-RPC error and reaches neither gate
nor the upstream.

While a person decides, MCP progress notifications go to the client (when it asked for them
with a progress token); a client that calls a tool as an MCP task gets the task at once and
the result when the person decides (`gate.mcp.tasks`). If the client cancels the call or the
task, goes away, or the proxy is stopped, the request is withdrawn. An upstream that exits or
drops the connection is reported: the call in flight gets an error result saying so (and is
recorded as `failed`), later requests a JSON-RPC error. The upstream's command line,
environment and connection are `gate.mcp.upstream`.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, TypeVar

import anyio
import mcp.types as types
from mcp.client.session import ClientSession, IncomingMessage
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from gate.asking.aftercall import outcome_of
from gate.asking.toolcall import Call, Verdict
from gate.asking.wording import clip
from gate.mcp.asking import Asker
from gate.mcp.listing import Listing
from gate.mcp.serving import Options, make_call, serve_stdio, token_hint, warn
from gate.mcp.tasks import Progress, Tasks
from gate.mcp.upstream import START_TIMEOUT, ProxyError, check, connect

#: why a request is withdrawn when the client cancels its call or goes away
CANCELLED = "the MCP client cancelled the call or disconnected"

R = TypeVar("R", bound=BaseModel)


class Relay:
    """The proxy's state: the upstream session, the client-facing session, the gate asker."""

    def __init__(self, name: str, opts: Options, asker: Asker) -> None:
        self.name = name
        self.opts = opts
        self.asker = asker
        self.upstream: ClientSession | None = None
        #: the client-facing session (captured from the first request), for notifications
        self.front: ServerSession | None = None
        #: why the upstream is gone, once it is
        self.dead: str | None = None
        #: one proxy process serves one client connection: that is its agent session
        self.session_id = f"mcp-{name}-{uuid.uuid4().hex[:16]}"
        #: the tool names of the upstream's latest tools/list
        self.tools = Listing(name)
        #: tool calls the client made as MCP tasks
        self.tasks = Tasks(f"gate mcp proxy {name}")

    def gated_name(self, tool: str) -> str:
        """The tool's name in gate: mcp__NAME__TOOL."""
        return f"mcp__{self.name}__{tool}"

    def lost(self) -> str:
        """Sentence for an upstream that went away."""
        return (
            f"The upstream MCP server {self.name!r} closed the connection (it exited or "
            "crashed); restart it (reconnect the MCP server in the client)."
        )

    async def request(self, request: Any, result_type: type[R], **kw: Any) -> R:
        """Send one request upstream; a dead upstream is an MCP error naming it."""
        if self.dead is not None or self.upstream is None:
            raise MCPError(types.INTERNAL_ERROR, self.dead or self.lost())
        try:
            return await self.upstream.send_request(request, result_type, **kw)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self.dead = self.lost()
                warn(f"gate mcp proxy {self.name}: {self.dead}")
                raise MCPError(types.INTERNAL_ERROR, self.dead) from None
            raise

    async def from_upstream(self, message: IncomingMessage) -> None:
        """Pass an upstream notification on to the client, unchanged."""
        if isinstance(message, Exception):
            warn(f"gate mcp proxy {self.name}: upstream transport error: {message!r}")
            return
        if isinstance(message, types.ProgressNotification):
            return  # progress of our own forwarded calls is relayed by the call itself
        if isinstance(message, types.ToolListChangedNotification):
            self.tools.forget()  # the next call reads the list afresh
        if self.front is not None:
            await self.front.send_notification(message)

    def seen(self, ctx: ServerRequestContext[Any]) -> None:
        """Remember the client-facing session, to send upstream notifications on."""
        self.front = ctx.session

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """tools/list, passed through (each tool marked as callable as a task); its names are
        the ones a call may use."""
        self.seen(ctx)
        result = await self.request(types.ListToolsRequest(params=params), types.ListToolsResult)
        self.tools.note(params.cursor if params else None, result)
        return result.model_copy(update={"tools": [Tasks.offered(t) for t in result.tools]})

    async def _read_listing(self, cursor: str | None) -> types.ListToolsResult:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        return await self.request(types.ListToolsRequest(params=params), types.ListToolsResult)

    # -- tools/call ---------------------------------------------------------------------------

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Ask gate, then forward (or refuse) one tool call of a tool the upstream listed."""
        await self.check_call(ctx, params)
        return await self.run_call(ctx, params, ctx.session.report_progress, CANCELLED)

    async def check_call(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> None:
        """Refuse a call of a tool the upstream did not list (a JSON-RPC error)."""
        self.seen(ctx)
        await self.tools.check(params.name, self._read_listing)

    async def run_call(
        self,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        report: Progress,
        cancelled_because: str,
    ) -> types.CallToolResult:
        """Ask gate about a checked call, then forward or refuse it; progress goes to `report`
        (the request's own progress, or its task's)."""
        args: dict[str, Any] = dict(params.arguments or {})
        key = f"mcp-{uuid.uuid4().hex}"  # MCP request ids repeat across connections
        client = ctx.session.client_params.client_info if ctx.session.client_params else None
        context: dict[str, Any] = {"source": "mcp-proxy", "mcp_server": self.name}
        if client is not None:
            context["mcp_client"] = f"{client.name} {client.version}".strip()
        call = make_call(
            self.opts,
            tool_name=self.gated_name(params.name),
            tool_args=args,
            key=key,
            derived=False,
            agent_id=self.opts.agent_id or (client.name if client else None) or "mcp-client",
            session_id=self.session_id,
            context=context,
        )

        reported = [0.0]  # progress must only grow: the upstream's own counts start after ours

        async def beat(waited: float, message: str) -> None:
            reported[0] = waited
            await report(waited, self.opts.timeout, message)

        verdict = await self.asker.ask(
            call,
            limit=self.opts.timeout,
            beat=beat,
            beat_every=self.opts.beat_every,
            cancelled_because=cancelled_because,
        )
        if not _runs(verdict, self.opts.on_no_rule):
            return _refusal(verdict)
        runs_with = verdict.updated_args if verdict.updated_args is not None else args
        return await self._forward(report, params, call, key, runs_with, verdict, reported[0])

    async def _forward(
        self,
        report: Progress,
        params: types.CallToolRequestParams,
        call: Call,
        key: str,
        runs_with: dict[str, Any],
        verdict: Verdict,
        waited: float,
    ) -> types.CallToolResult:
        # The client's progress token is the proxy's to answer: the upstream gets its own.
        mine = ("progress_token", "progressToken")
        meta = {k: v for k, v in (params.meta or {}).items() if k not in mine}
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=params.name, arguments=runs_with, _meta=meta or None
            )
        )

        async def progress(value: float, total: float | None, message: str | None) -> None:
            # After the wait's own progress (seconds waited) the upstream's continues from there.
            more = None if total is None else waited + total
            await report(waited + value, more, message)

        recorded = verdict.request is not None

        async def record(outcome: str, summary: str | None) -> None:
            if recorded:
                with anyio.CancelScope(shield=True):
                    report = await self.asker.record(
                        call, key=key, ran_with=runs_with, outcome=outcome, summary=summary
                    )
                if report.kind == "failed":
                    warn(f"gate mcp proxy {self.name}: could not record the outcome: {report.text}")

        try:
            result = await self.request(request, types.CallToolResult, progress_callback=progress)
        except anyio.get_cancelled_exc_class():
            await record("failed", "the MCP client cancelled the call while the tool was running")
            raise
        except MCPError as exc:
            await record("failed", exc.message)
            if self.dead is not None:
                return _error_result(
                    f"gate: {self.dead} The {params.name} call was sent to it "
                    "but no result came back, so it may or may not have run."
                )
            raise
        text = " ".join(c.text for c in result.content if isinstance(c, types.TextContent))
        outcome, summary = (
            outcome_of(text, text or "the tool reported an error")
            if result.is_error
            else outcome_of(text)
        )
        await record(outcome, summary)
        return result


def _runs(verdict: Verdict, on_no_rule: str) -> bool:
    return verdict.allowed or (verdict.kind == "no_rule" and on_no_rule == "allow")


def _refusal(verdict: Verdict) -> types.CallToolResult:
    reason = verdict.reason
    if verdict.kind == "no_rule":
        reason += " This proxy refuses calls no rule covers (--on-no-rule deny)."
    return _error_result(reason)


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=clip(text))], is_error=True)


# -- the client-facing server -----------------------------------------------------------------


def build_server(relay: Relay, init: types.InitializeResult) -> Server[Any]:
    """A server that looks like the upstream: its identity, and handlers for what it offers."""
    caps = init.capabilities

    def forward(
        request_type: Callable[..., Any], result_type: type[R]
    ) -> Callable[[ServerRequestContext[Any], Any], Awaitable[R]]:
        async def handler(ctx: ServerRequestContext[Any], params: Any) -> R:
            relay.seen(ctx)
            return await relay.request(request_type(params=params), result_type)

        return handler

    handlers: dict[str, Any] = {}
    if caps.tools is not None:
        handlers["on_list_tools"] = relay.list_tools
        handlers["on_call_tool"] = relay.call_tool
    if caps.resources is not None:
        handlers["on_list_resources"] = forward(
            types.ListResourcesRequest, types.ListResourcesResult
        )
        handlers["on_list_resource_templates"] = forward(
            types.ListResourceTemplatesRequest, types.ListResourceTemplatesResult
        )
        handlers["on_read_resource"] = forward(types.ReadResourceRequest, types.ReadResourceResult)
        if caps.resources.subscribe:
            handlers["on_subscribe_resource"] = forward(types.SubscribeRequest, types.EmptyResult)
            handlers["on_unsubscribe_resource"] = forward(
                types.UnsubscribeRequest, types.EmptyResult
            )
    if caps.prompts is not None:
        handlers["on_list_prompts"] = forward(types.ListPromptsRequest, types.ListPromptsResult)
        handlers["on_get_prompt"] = forward(types.GetPromptRequest, types.GetPromptResult)
    if caps.completions is not None:
        handlers["on_completion"] = forward(types.CompleteRequest, types.CompleteResult)
    info = init.server_info
    server: Server[Any] = Server(
        info.name,
        version=info.version,
        title=info.title,
        description=info.description,
        instructions=init.instructions,
        website_url=info.website_url,
        icons=info.icons,
        **handlers,
    )
    if caps.tools is not None:
        relay.tasks.install(server, relay.run_call, relay.check_call)
    if caps.logging is not None:
        # Registered by method, not on_set_logging_level: that keyword is deprecated in the SDK.
        server.add_request_handler(
            "logging/setLevel",
            types.SetLevelRequestParams,
            forward(types.SetLevelRequest, types.EmptyResult),
        )
    return server


def init_options(server: Server[Any], init: types.InitializeResult) -> InitializationOptions:
    """The client sees the upstream's capabilities (list_changed, subscribe, ...), with the
    proxy's own `tasks` for a server with tools: a call held for a person may be a task. An
    upstream's own task support is not relayed (the proxy calls it without `task`)."""
    options = server.create_initialization_options()
    caps = init.capabilities
    tasks = Tasks.capability() if caps.tools is not None else None
    return options.model_copy(update={"capabilities": caps.model_copy(update={"tasks": tasks})})


def run(ns: argparse.Namespace) -> int:
    """`gate mcp proxy`: connect to the upstream, then serve the client over stdio."""
    opts = Options(ns)
    try:
        check(ns)
    except ProxyError as exc:
        warn(f"gate mcp proxy: {exc}")
        return 2
    problem = opts.problem()
    if problem is not None:
        warn(f"gate mcp proxy: {problem}")
        return 2
    return anyio.run(_main, ns, opts)


async def _main(ns: argparse.Namespace, opts: Options) -> int:
    asker = Asker(opts.gate_url, opts.token, token_hint=token_hint())
    relay = Relay(ns.name, opts, asker)
    what = f"gate mcp proxy {ns.name}"
    try:
        async with AsyncExitStack() as stack:
            try:
                relay.upstream, init = await connect(ns, stack, relay.from_upstream)
            except Exception as exc:
                warn(f"{what}: the upstream MCP server did not start: {_describe(exc)}")
                return 1
            server = build_server(relay, init)
            await serve_stdio(server, init_options(server, init), asker, what, relay.tasks)
    except BaseException as exc:  # an upstream that dies can surface here as an exception group
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            raise
        warn(f"{what}: stopped: {_describe(exc)}")
        return 1
    finally:
        with anyio.CancelScope(shield=True):
            await asker.aclose()
    return 0


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return f"no answer to initialize within {START_TIMEOUT:g} s"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
