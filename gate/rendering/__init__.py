"""A call as people see it: the one place that renders a tool call from its arguments.

Every surface (the console's queue and request page, every chat card, mail, `gate requests
show`) shows a call through `render_call`, so what an approver reads is gate's reading of the
arguments, never the agent's description of them. The rendering is tool-aware and inert:

* shell commands (`shell`) line by line, numbered, the count in the title and the headline;
* file edits (`diffs`: Edit, MultiEdit, Write, str_replace-style editors, apply_patch) as
  unified diffs with line numbers;
* URLs (`urls`) with the host set apart and what makes it pass for another flagged;
* SQL statements line by line; MCP tools (`mcp__server__tool`) with their server named;
* every argument no section showed, as a readable tree (`tree`): nothing is dropped.

Text comes out of `gate.text.untrusted` (`inert`): secrets masked (their JSON pointers listed for
a reveal), invisible characters, bidi controls and look-alike letters shown as `\\uXXXX`
escapes and flagged on the line they occur on, as are very long lines and values cut at the
scan limit. `as_text` (`plain`) writes a rendering as plain text for surfaces with a length
limit: what does not fit is never cut silently, the text ends by saying how much is not shown
and where the whole call is.

May import: gate.text.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from gate.rendering import diffs, shell, tree, urls
from gate.rendering.inert import Call, one_line, pieces
from gate.rendering.plain import as_text, headline
from gate.rendering.shapes import (
    CallRendering,
    Flag,
    FlagKind,
    Line,
    LineKind,
    Section,
    SectionKind,
    Shown,
)
from gate.text import untrusted

log = logging.getLogger(__name__)

#: how much of a tool's name is shown (a name is a word; a longer one is flagged as cut)
_NAME_SHOWN = 512


def split_mcp(tool_name: str) -> tuple[str | None, str]:
    """(server, tool) of an `mcp__server__tool` name; (None, name) for any other."""
    if tool_name.startswith("mcp__"):
        server, sep, tool = tool_name[5:].partition("__")
        if sep and server and tool:
            return server, tool
    return None, tool_name


def render_call(
    tool_name: str,
    args: Any,
    *,
    watched: Collection[str] = (),
    limit: int | None = untrusted.SCAN_LIMIT,
) -> CallRendering:
    """The call `tool_name(args)` as people see it; `watched` names the top-level arguments
    the rule's condition reads, marked on every surface. Each string is shown up to `limit`
    characters (None: whole, for the request page). Never raises: a call gate cannot render
    by kind is shown as a tree, and one it cannot render at all says so."""
    try:
        return _render(str(tool_name), args, watched, limit)
    except Exception:  # a surface must show something for every call, and fail closed
        log.exception("rendering a %.100r call failed; showing its arguments as JSON", tool_name)
        return _fallback(str(tool_name), args)


def _render(
    tool_name: str, args: Any, watched: Collection[str], limit: int | None
) -> CallRendering:
    names = (watched,) if isinstance(watched, str) else watched  # one name, not its letters
    call = Call(limit, frozenset(str(w) for w in names))
    name = one_line(tool_name, _NAME_SHOWN)
    for kind, words in name.found:
        call.flag(kind, f"the tool's name holds {words}")
    if len(tool_name) > _NAME_SHOWN:
        call.flag("cut", f"the tool's name is {len(tool_name):,} characters long; cut")
    server, base = split_mcp(tool_name)
    if isinstance(args, Mapping):
        rest = _sections(call, base, args)
        if rest or not call.sections:
            title = "Other arguments" if call.sections else "Arguments"
            tree.render_tree(call, args, rest, title if args else "Arguments (none)")
    else:
        tree.render_tree(call, args, None, "Arguments")
    shown_server = one_line(server, _NAME_SHOWN).text if server else None
    shown_tool = one_line(base, _NAME_SHOWN).text if server else name.text
    sections = tuple(call.sections)
    return CallRendering(
        tool=name.text,
        server=shown_server,
        headline=headline(shown_tool, shown_server, sections),
        sections=sections,
        flags=tuple(call.flags),
        masked=tuple(call.masked),
        whole=not call.cut and untrusted.masks_only_credentials(args),
    )


def _sections(call: Call, tool: str, args: Mapping[Any, Any]) -> list[Any]:
    """The tool-specific sections of a call; the top-level keys none of them showed."""
    claimed: set[Any] = set()
    patch = diffs.find_patch(args)
    if patch:
        diffs.render_patch(call, *patch)
        claimed.add(patch[0])
    elif diffs.is_editor_call(tool, args):
        claimed.update(diffs.render_editor(call, args))
    else:
        claimed.update(diffs.render_edit(call, tool, args))
        if not claimed:
            command = shell.render_command(call, args)
            if command:
                claimed.add(command[0])
    claimed.update(
        shell.render_sql(call, tool, {k: v for k, v in args.items() if k not in claimed})
    )
    claimed.update(urls.render_urls(call, {k: v for k, v in args.items() if k not in claimed}))
    return [key for key in args if key not in claimed]


def shown_chars(tool_name: str, args: Any, *, watched: Collection[str] = ()) -> int:
    """How many characters a surface must show to show the call whole: the length of
    `as_text` of its rendering, with no limit. A chat card says how many it holds
    (`Click.args_chars`); it offers Approve, and gate counts its approval, only when this
    fits, so the card and gate's check on an approval measure the same text."""
    return len(as_text(render_call(tool_name, args, watched=watched)).text)


def render_text(text: str, *, limit: int | None = untrusted.SCAN_LIMIT) -> tuple[Line, ...]:
    """Untrusted free text (an agent's summary, a reason) as inert numbered lines, masked and
    escaped like a call's arguments; `Line.flagged` marks a line hiding something."""
    parts, cut = pieces(str(text), limit)  # a cut ends the last line with untrusted's marker
    return tuple(
        Line(
            p.text,
            number=i + 1,
            flagged=bool(p.found) or (bool(cut) and i == len(parts) - 1),
            masked_path="" if p.masked else None,
        )
        for i, p in enumerate(parts)
    )


def _fallback(tool_name: str, args: Any) -> CallRendering:
    """The arguments as masked JSON, said to be shown so because rendering failed."""
    try:
        text = untrusted.to_json(args, indent=2)
    except Exception:  # even JSON failed: say so rather than show nothing
        log.exception("showing a %.100r call's arguments as JSON failed", tool_name)
        text = "(gate could not show these arguments: see the server log)"
    lines = tuple(Line(t, number=i + 1) for i, t in enumerate(text.split("\n")))
    message = "gate could not render this call by kind: its arguments are shown as JSON"
    name = ascii(tool_name[:_NAME_SHOWN])[1:-1]  # inert whatever it holds: every escape is ASCII
    return CallRendering(
        tool=name,
        server=None,
        headline=f"{name} (arguments shown as JSON)",
        sections=(Section("tree", "Arguments (as JSON)", lines),),
        flags=(Flag("cut", message),),
        masked=(),
        whole=False,
    )


__all__ = [
    "CallRendering",
    "Flag",
    "FlagKind",
    "Line",
    "LineKind",
    "Section",
    "SectionKind",
    "Shown",
    "as_text",
    "render_call",
    "render_text",
    "shown_chars",
    "split_mcp",
]
