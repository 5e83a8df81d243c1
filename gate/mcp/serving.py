"""What `gate mcp prompt` and `gate mcp proxy` share: the asker, stdio serving, stopping.

Stopping withdraws: on SIGTERM, SIGINT or SIGHUP (the client quit or restarted the server),
when the client cancels a call, and when it closes stdin (it quit or crashed), every wait
still in progress is cancelled, and a cancelled wait withdraws its gate request (see
`Asker.ask`), so approvers are not left deciding calls that can no longer run.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.server.stdio import stdio_server

from gate.asking.askflow import DEFAULT_URL
from gate.asking.toolcall import Call, summarise
from gate.asking.wording import TOKEN_FIX
from gate.mcp import sealed
from gate.mcp.asking import BEAT_EVERY, Asker

if TYPE_CHECKING:
    from gate.mcp.tasks import Tasks

#: the signals that mean "the client is done with this server"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Options:
    """The parsed command line, typed (what the servers read from it)."""

    def __init__(self, ns: argparse.Namespace) -> None:
        self.gate_url = str(ns.gate_url).strip()
        self.token = sealed.token()  # taken out of the environment first thing
        self.timeout = max(0.0, float(ns.timeout))
        every = ns.progress_every
        self.beat_every = BEAT_EVERY if every is None else max(0.05, float(every))
        self.agent_id: str | None = ns.agent_id
        self.user_id: str | None = ns.user_id
        self.metadata: dict[str, Any] = dict(ns.metadata)
        self.on_no_rule: str = ns.on_no_rule

    def problem(self) -> str | None:
        """Why this configuration cannot work, or None."""
        if not self.gate_url.startswith(("http://", "https://")):
            return (
                f"the gate URL {self.gate_url!r} is not an http(s) URL: set GATE_URL "
                f"(or --url; --gate-url for gate mcp proxy), e.g. {DEFAULT_URL}"
            )
        return None


def make_call(
    opts: Options,
    *,
    tool_name: str,
    tool_args: dict[str, Any],
    key: str,
    derived: bool,
    agent_id: str | None,
    session_id: str | None,
    context: dict[str, Any],
) -> Call:
    """The `POST /v1/gate` call for one MCP tool call.

    `--on-no-rule ask` marks the call `requires_confirmation`, so gate asks a person when no
    rule covers it (a rule that matches still decides).
    """
    metadata = dict(opts.metadata)
    if opts.on_no_rule == "ask":
        metadata["requires_confirmation"] = True
    return Call(
        tool_name=tool_name,
        tool_args=tool_args,
        agent_id=agent_id,
        user_id=opts.user_id,
        session_id=session_id,
        idempotency_key=key,
        summary=summarise(tool_name, tool_args),
        metadata=metadata,
        context=context,
        derived_key=derived,
    )


def token_hint() -> str:
    """How to fix a refused token, for `gate mcp` (the token comes from the environment)."""
    return TOKEN_FIX.replace(" (or --token)", "") + " in the MCP server's env block"


async def serve_stdio(
    server: Server[Any],
    init: InitializationOptions,
    asker: Asker,
    what: str,
    tasks: Tasks | None = None,
) -> None:
    """Serve `server` on stdin/stdout until the client disconnects or a stop signal arrives.

    MCP tasks (`tasks`) run in this function's task group: they end, and withdraw their gate
    requests, when it does.
    """
    async with anyio.create_task_group() as tg:
        if tasks is not None:
            tasks.group = tg
        tg.start_soon(_watch_signals, asker, what, tg.cancel_scope)
        async with stdio_server() as (read, write):
            # On EOF the SDK cancels the calls still in flight, which withdraws their requests.
            await server.run(read, write, init)
        tg.cancel_scope.cancel()


async def _watch_signals(asker: Asker, what: str, scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            asker.stopping = f"{what} was stopped ({signal.Signals(signum).name})"
            scope.cancel()
            return


def warn(text: str) -> None:
    """One line on stderr (MCP clients keep a server's stderr in their logs)."""
    sys.stderr.write(text.rstrip() + "\n")
    sys.stderr.flush()
