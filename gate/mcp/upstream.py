"""`gate mcp proxy`'s upstream: its command line checked, its environment and headers, the
connection to it (a stdio command or a streamable HTTP URL).
"""

from __future__ import annotations

import argparse
import os
import re
from contextlib import AsyncExitStack

import anyio
import mcp.types as types
from mcp.client.session import ClientSession, MessageHandlerFnT

#: a server name as MCP clients spell it; no "__", which separates the parts of mcp__NAME__TOOL
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: how long the upstream may take to start and answer `initialize`
START_TIMEOUT = 60.0
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ProxyError(Exception):
    """The proxy cannot start as configured (the message says what to fix)."""


def expand_headers(lines: list[str], env: dict[str, str]) -> dict[str, str]:
    """`'Name: value'` lines to headers, `${VAR}` read from `env`; ProxyError if one is unset."""
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise ProxyError(f"--header {line!r} is not 'Name: value'")

        name = name.strip()
        missing = [var for var in _ENV_REF.findall(value) if var not in env]
        if missing:
            raise ProxyError(f"--header {name!r} uses ${{{missing[0]}}}, which is not set")
        headers[name] = _ENV_REF.sub(lambda m: env[m.group(1)], value.strip())
    return headers


def upstream_env(env: dict[str, str]) -> dict[str, str]:
    """The environment for a stdio upstream: the proxy's, without gate's own settings.

    The upstream is someone else's program: it gets the variables the client configured for
    the server, but not the gate agent token (nor any other GATE_* setting).
    """
    return {k: v for k, v in env.items() if not k.startswith("GATE_")}


async def connect(
    ns: argparse.Namespace, stack: AsyncExitStack, on_message: MessageHandlerFnT
) -> tuple[ClientSession, types.InitializeResult]:
    """Start (or reach) the upstream, initialized; `on_message` gets its notifications."""
    if ns.url:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = expand_headers(ns.header, dict(os.environ))
        http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
        streams = await stack.enter_async_context(streamable_http_client(ns.url, http_client=http))
    else:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command = list(ns.upstream)
        params = StdioServerParameters(
            command=command[0], args=command[1:], env=upstream_env(dict(os.environ))
        )
        streams = await stack.enter_async_context(stdio_client(params))
    read, write = streams[0], streams[1]
    session = ClientSession(read, write, message_handler=on_message)
    await stack.enter_async_context(session)
    with anyio.fail_after(START_TIMEOUT):
        return session, await session.initialize()


def check(ns: argparse.Namespace) -> None:
    """Refuse a command line that cannot work, saying what to fix."""
    if not NAME.match(ns.name) or "__" in ns.name:
        raise ProxyError(
            f"--name {ns.name!r}: use letters, digits, '-' and single '_' (it becomes "
            "mcp__NAME__TOOL in gate rules)"
        )
    command = list(ns.upstream)
    if command and command[0] == "--":
        command = command[1:]
    ns.upstream = command
    if bool(ns.url) == bool(command):
        raise ProxyError("give the upstream either as -- COMMAND ARGS... or as --upstream-url URL")
    if ns.url and not str(ns.url).startswith(("http://", "https://")):
        raise ProxyError(f"--upstream-url {ns.url!r} is not an http(s) URL")
    if ns.header and not ns.url:
        raise ProxyError("--header is for an HTTP upstream (--upstream-url)")
    if ns.url:
        expand_headers(ns.header, dict(os.environ))
