"""`gate mcp`: gate for MCP clients, on the official MCP Python SDK (the `mcp` extra).

* `gate mcp prompt`: a stdio MCP server with one tool, `approve`, for Claude Code's
  `--permission-prompt-tool mcp__gate__approve` (headless `claude -p`, the Agent SDK).
* `gate mcp proxy --name NAME -- COMMAND ARGS...` / `--url URL`: put gate in front of any MCP
  server; every `tools/call` is asked about as tool `mcp__NAME__TOOL`, everything else passes
  through.

Both keep a call held for a person alive with progress notifications, answer it as an MCP task
for clients that call tools as tasks (`gate.mcp.tasks`), and withdraw the request of a call
whose client gave up, so it never runs.

This module only parses the command line: the SDK is imported by the subcommand, so the rest
of the `gate` command works without the extra installed.

May import: gate.asking, gate.client, gate.hook, gate.text (and the MCP SDK, in the
subcommands only).
"""

from __future__ import annotations

import argparse
import os
import sys

from gate.asking.askflow import DEFAULT_TIMEOUT, DEFAULT_URL
from gate.hook.command import add_metadata_option

MISSING_SDK = (
    "gate mcp needs the MCP Python SDK, which is an optional extra: "
    "pip install 'gate-approvals[mcp]' (from a clone: pip install '.[mcp]')"
)


def main(argv: list[str]) -> int:
    """`gate mcp prompt|proxy ...`: run the MCP server until the client disconnects."""
    ns = _parser().parse_args(argv)
    if ns.command is None:
        _parser().print_help(sys.stderr)
        return 2
    from gate.mcp.sealed import SealError, seal

    try:
        seal(argv)  # gate.cli did already, unless gate mcp was called from Python
    except SealError as exc:
        sys.stderr.write(f"gate: {exc}\n")
        return 2
    try:
        if ns.command == "prompt":
            from gate.mcp.prompt import run as run_prompt

            return run_prompt(ns)
        from gate.mcp.proxy import run as run_proxy

        return run_proxy(ns)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != "mcp":
            raise
        sys.stderr.write(f"gate: {MISSING_SDK}\n")
        return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gate mcp", description="gate for MCP clients.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    prompt = sub.add_parser(
        "prompt",
        help="MCP server with an `approve` tool for Claude Code's --permission-prompt-tool",
        description="A stdio MCP server with one tool, `approve`: use it with "
        "`claude -p --mcp-config ... --permission-prompt-tool mcp__gate__approve`.",
    )
    _gate_url(prompt, "--url", hidden="--gate-url")
    _common(prompt, default_agent="claude-code")
    prompt.add_argument(
        "--on-no-rule",
        choices=["ask", "allow", "deny"],
        default="ask",
        help="when no gate rule covers the call: ask a person in gate (default; Claude Code "
        "asks this tool only where it would have asked its user), allow it, or deny it",
    )

    _add_proxy(sub)
    return p


def _add_proxy(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`gate mcp proxy`'s options."""
    proxy = sub.add_parser(
        "proxy",
        help="gate the tools of any MCP server (stdio command or streamable HTTP URL)",
        description="An MCP server that passes everything through to the upstream server, "
        "except tools/call, which gate decides first (as tool mcp__NAME__TOOL).",
    )
    proxy.add_argument(
        "--name",
        required=True,
        help="the server's name in rules: its tools are gated as mcp__NAME__TOOL",
    )
    proxy.add_argument(
        "--upstream-url",
        "--url",  # its first spelling, kept for clients' configs written with it
        dest="url",
        metavar="URL",
        help="streamable HTTP URL of the upstream MCP server (instead of a command after --)",
    )
    # Here the gate server's URL is --gate-url: --url named the upstream's first.
    _gate_url(proxy, "--gate-url", hidden=None)
    proxy.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="HTTP header for the upstream (repeatable); ${VAR} in VALUE is read from the "
        "environment, so secrets stay in the client's env block",
    )
    _common(proxy, default_agent=None)
    proxy.add_argument(
        "--on-no-rule",
        choices=["allow", "ask", "deny"],
        default="allow",
        help="when no gate rule covers a tool call: forward it (default), ask a person, or "
        "refuse it",
    )
    proxy.add_argument(
        "upstream",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND ARGS...",
        help="the upstream MCP server's command line (stdio)",
    )


def _gate_url(p: argparse.ArgumentParser, flag: str, *, hidden: str | None) -> None:
    """The gate server's URL as `flag` (and `hidden`, an older spelling, not in --help)."""
    default = os.environ.get("GATE_URL") or DEFAULT_URL
    p.add_argument(
        flag,
        dest="gate_url",
        default=default,
        metavar="URL",
        help=f"gate server URL (default: $GATE_URL or {DEFAULT_URL}); the agent token is "
        "read from $GATE_TOKEN, and kept out of reach of the programs gate mcp starts",
    )
    if hidden is not None:
        p.add_argument(hidden, dest="gate_url", default=default, help=argparse.SUPPRESS)


def _common(p: argparse.ArgumentParser, *, default_agent: str | None) -> None:
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for a person before withdrawing and refusing (default: "
        f"{DEFAULT_TIMEOUT:g}; keep it below the client's own tool-call timeout)",
    )
    p.add_argument(
        "--progress-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how often to send MCP progress notifications while waiting (default: 10)",
    )
    p.add_argument(
        "--agent-id",
        default=os.environ.get("GATE_AGENT_ID") or default_agent,
        help="$GATE_AGENT_ID (default: "
        + (default_agent or "the MCP client's name from initialize")
        + ")",
    )
    p.add_argument("--user-id", default=os.environ.get("GATE_USER_ID"), help="$GATE_USER_ID")
    add_metadata_option(p)
