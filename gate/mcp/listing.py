"""The tools an upstream MCP server listed: the only names `gate mcp proxy` asks about and
forwards.

A call is forwarded only under a name of the upstream's latest `tools/list`, matched
exactly: the client's listing (passed through), or the proxy's own, read when a call names a
tool it has not seen listed or the upstream said its list changed. Any other name is refused
with a JSON-RPC error before gate or the upstream hears of it. Without this, a server that
looks names up loosely would run `delete_file` for `Delete_File`, `DELETE_FILE`,
`ｄｅｌｅｔｅ_ｆｉｌｅ` or `delete_file` plus a zero-width space, none of which a rule for
`mcp__NAME__delete_file` covers, and with `--on-no-rule allow` (the default) nobody would
be asked.

Names are compared after Unicode normalisation (`name_key`) for two things: to tell the
client which listed tool a refused variant resembles, and to refuse the tools of an upstream
that lists two names that read alike, since gate could not tell which rule is meant.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Awaitable, Callable

import mcp.types as types
from mcp.shared.exceptions import MCPError

from gate.text.untrusted import strip_invisible

#: pages of tools/list the proxy reads itself before it stops (a cursor that never ends)
MAX_LIST_PAGES = 100
#: the most of a refused tool name an error repeats
SHOWN_NAME = 80
#: code points that render as nothing but are not in a format category (variation selectors,
#: the combining grapheme joiner, Mongolian free variation selectors): `name_key` drops them
_IGNORABLE = frozenset(
    [0x034F, *range(0x180B, 0x1810), *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]
)

#: reads one page of the upstream's tools/list, from a cursor (None: the first page)
ReadPage = Callable[[str | None], Awaitable[types.ListToolsResult]]


def name_key(name: str) -> str:
    """How a tool name reads: NFKC (fullwidth and other compatibility forms to their plain
    letters), invisible characters removed, case folded. Two names with one key pass for
    each other."""
    text = unicodedata.normalize("NFKC", strip_invisible(name))
    text = "".join(c for c in text if ord(c) not in _IGNORABLE)
    return unicodedata.normalize("NFKC", text.casefold())


class Listing:
    """The tool names of one upstream's latest tools/list."""

    def __init__(self, server: str) -> None:
        self.server = server
        #: None until read, and again once the upstream says its list changed
        self.names: frozenset[str] | None = None

    def note(self, cursor: str | None, result: types.ListToolsResult) -> None:
        """A tools/list page passed through to the client: a first page starts afresh."""
        names = frozenset(tool.name for tool in result.tools)
        self.names = names if cursor is None or self.names is None else self.names | names

    def forget(self) -> None:
        """The upstream's list changed: the next call reads it again."""
        self.names = None

    async def read(self, page: ReadPage) -> frozenset[str]:
        """Every page of the upstream's tools/list, read by the proxy itself."""
        names: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            result = await page(cursor)
            names.update(tool.name for tool in result.tools)
            cursor = result.next_cursor
            if not cursor:
                break
        self.names = frozenset(names)
        return self.names

    async def check(self, name: str, page: ReadPage) -> None:
        """Return if the upstream lists a tool of exactly this name and no other that reads
        alike; otherwise raise an MCP error saying why (the call goes nowhere)."""
        names = self.names
        if names is None or name not in names:
            names = await self.read(page)
        key = name_key(name)
        alike = sorted(n for n in names if name_key(n) == key)
        if name in names and alike == [name]:
            return
        shown = ascii(name[:SHOWN_NAME])
        if name in names:
            others = ", ".join(ascii(n[:SHOWN_NAME]) for n in alike if n != name)
            why = (
                f"the upstream MCP server {self.server!r} lists both {shown} and {others}, "
                "which differ only in case, width or invisible characters, so gate cannot tell "
                "which rule covers the call"
            )
        elif alike:
            why = (
                f"the upstream MCP server {self.server!r} lists no tool {shown}; it lists "
                f"{ascii(alike[0][:SHOWN_NAME])}, which that name only resembles (case, width "
                "or invisible characters differ): call it by its exact name"
            )
        else:
            why = f"the upstream MCP server {self.server!r} lists no tool {shown}"
        raise MCPError(types.INVALID_PARAMS, f"gate: Unknown tool: {why}. It was not run.")
