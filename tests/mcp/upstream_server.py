"""A small MCP server for the proxy tests, built with the official SDK's `MCPServer`.

Every tool that runs appends one JSON line `{"tool", "args"}` to the file named by
$UPSTREAM_MARKER, so a test can tell whether (and with what) the upstream was really called;
every tools/call it receives appends the name asked for to $UPSTREAM_HEARD. It looks tool
names up loosely, as many servers do (case, width and invisible characters ignored when no
tool has the exact name), which is what the proxy must not let a variant name reach. It also
has a resource and a prompt, to check that the proxy passes them through.

    python tests/mcp/upstream_server.py                     # stdio
    python tests/mcp/upstream_server.py --http PORT_FILE    # streamable HTTP on 127.0.0.1:0;
                                                            # the port is written to PORT_FILE

In HTTP mode every request must carry `Authorization: Bearer $UPSTREAM_TOKEN` (401
otherwise), which shows that the proxy sends the headers it was given.
"""

from __future__ import annotations

import json
import os
import sys
import unicodedata
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

INSTRUCTIONS = "Fixture server for gate's MCP proxy tests."
README_TEXT = "hello from the upstream fixture"


def _loose(name: str) -> str:
    kept = "".join(c for c in name if unicodedata.category(c) != "Cf")
    return unicodedata.normalize("NFKC", kept).casefold()


class LooseServer(MCPServer):
    """Finds a tool by a name that only resembles it when none has the exact name."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        heard = os.environ.get("UPSTREAM_HEARD")
        if heard:
            with open(heard, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(name) + "\n")
        if self._tool_manager.get_tool(name) is None:
            found = [
                t.name for t in self._tool_manager.list_tools() if _loose(t.name) == _loose(name)
            ]
            name = found[0] if found else name
        return await super().call_tool(name, arguments, context)


server = LooseServer("upstream-fixture", version="1.2.3", instructions=INSTRUCTIONS)


def _record(tool: str, args: dict[str, Any]) -> None:
    marker = os.environ.get("UPSTREAM_MARKER")
    if marker:
        with open(marker, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"tool": tool, "args": args}) + "\n")


@server.tool(description="Append a label to the marker file.")
def write_marker(label: str) -> str:
    _record("write_marker", {"label": label})
    return f"wrote {label}"


@server.tool(description="Pay a vendor (records the payment in the marker file).")
def pay_vendor(vendor: str, amount: int) -> str:
    _record("pay_vendor", {"vendor": vendor, "amount": amount})
    return f"paid {vendor} {amount}"


@server.tool(description="A tool that runs and then reports a failure.")
def flaky(reason: str) -> str:
    _record("flaky", {"reason": reason})
    raise ToolError(f"flaky failed: {reason}")


@server.tool(description="Exit the server process in the middle of a call.")
def crash(code: int = 3) -> str:
    _record("crash", {"code": code})
    sys.stderr.flush()
    os._exit(code)


@server.tool(description="Delete a file (records the deletion in the marker file).")
def delete_file(path: str) -> str:
    _record("delete_file", {"path": path})
    return f"deleted {path}"


@server.tool(description="Read a file.")
def read_file(path: str) -> str:
    _record("read_file", {"path": path})
    return f"read {path}"


@server.tool(name="Read_File", description="Read a file, by a name that reads like read_file.")
def read_file_too(path: str) -> str:
    _record("Read_File", {"path": path})
    return f"read {path} too"


@server.tool(description="Which of the named environment variables this server can see.")
def seen_env(names: list[str]) -> str:
    _record("seen_env", {"names": names})
    return json.dumps(sorted(n for n in names if n in os.environ))


@server.tool(description="What this server can read of its own and its parent's environment.")
def peek() -> str:
    _record("peek", {})
    parent = os.getppid()
    seen: dict[str, Any] = {
        "own_env": dict(os.environ),
        "own_environ": _read_proc("self", "environ"),
        "parent_cmdline": _read_proc(str(parent), "cmdline"),
        "parent_environ": _read_proc(str(parent), "environ"),
        "parent_maps": _read_proc(str(parent), "maps")[:200],
    }
    return json.dumps(seen)


def _read_proc(pid: str, name: str) -> str:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"


@server.tool(description="Report progress, then tell the client the resource list changed.")
async def announce(ctx: Context) -> str:
    _record("announce", {})
    await ctx.report_progress(1, 2, "halfway")
    await ctx.request_context.session.send_resource_list_changed()
    return "announced"


@server.resource("fixture://readme", name="readme", mime_type="text/plain")
def readme() -> str:
    return README_TEXT


@server.prompt(description="Greet someone.")
def greet(name: str) -> str:
    return f"Say hello to {name}."


def _serve_http(port_file: Path) -> None:
    import anyio
    import uvicorn

    app = server.streamable_http_app()
    token = os.environ.get("UPSTREAM_TOKEN", "")

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization", b"").decode() != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"missing upstream token"})
                return
        await app(scope, receive, send)

    config = uvicorn.Config(guarded, host="127.0.0.1", port=0, log_level="warning")
    http = uvicorn.Server(config)

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(http.serve)
            while not http.started:
                await anyio.sleep(0.02)
            port = http.servers[0].sockets[0].getsockname()[1]
            port_file.write_text(str(port))

    anyio.run(run)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        _serve_http(Path(sys.argv[2]))
    else:
        server.run("stdio")
