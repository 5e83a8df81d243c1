"""A call as people see it: the one place that renders a tool call from its arguments.

Every surface (the console's queue and request page, every chat card, mail, `gate requests
show`) shows a call through `render_call`, so what an approver reads is gate's reading of the
arguments, never the agent's description of them. The rendering is tool-aware (shell commands
line by line, file edits as diffs, URLs with their host apart, SQL, MCP tools with their
server, any other JSON as a tree) and inert: text comes out of `gate.untrusted` with invisible
characters shown escaped, look-alikes flagged and secrets masked, each flagged where it occurs.

`as_text` writes a rendering as plain text for surfaces with a length limit: what does not fit
is never cut silently, the text ends by saying how much is not shown and where the whole call
is.

Status: interface skeleton (types and entry points); the tool-aware renderers are being filled
in. Surfaces may code against the types now.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gate import untrusted

#: what a section shows
SectionKind = Literal["command", "diff", "url", "sql", "tree", "text"]
#: how a line reads: diff lines are "add", "del", "context" or "hunk"
LineKind = Literal["plain", "add", "del", "context", "hunk"]
#: what a flag warns of
FlagKind = Literal["invisible", "bidi", "lookalike", "long_line", "masked"]


@dataclass(frozen=True, slots=True)
class Flag:
    """Something about the call an approver must not miss, said where it occurs."""

    kind: FlagKind
    #: the sentence every surface shows ("line 2 holds a right-to-left override, shown as
    #: \\u202e")
    message: str
    #: JSON pointer of the argument it is in ("/command"); "" for the call as a whole
    path: str = ""
    #: 1-based line of the section it is in, when it is on one line
    line: int | None = None


@dataclass(frozen=True, slots=True)
class Line:
    """One line as shown: already inert (escaped, masked), never longer than what it holds."""

    text: str
    kind: LineKind = "plain"
    #: the line's number (a diff's new-side number; its old-side one for a deletion)
    number: int | None = None
    #: a diff line's old-side number
    old_number: int | None = None
    #: a flag points at this line
    flagged: bool = False
    #: JSON pointer of the masked value this line shows, the target of a reveal
    masked_path: str | None = None


@dataclass(frozen=True, slots=True)
class Section:
    """One part of a call: a command, one file's diff, a URL, a statement, a tree."""

    kind: SectionKind
    #: gate's heading for it ("Command · 2 lines", "Edit src/app.py · +3 −1")
    title: str
    lines: tuple[Line, ...]
    #: JSON pointer of the argument it shows ("" for several)
    path: str = ""
    #: the rule's condition reads this argument
    watched: bool = False
    #: a URL section's host, set apart from the rest of the URL
    host: str | None = None


@dataclass(frozen=True, slots=True)
class CallRendering:
    """A whole call as gate renders it."""

    tool: str
    #: the MCP server of an `mcp__server__tool` name, else None
    server: str | None
    #: one line in gate's words, for lists and card headers
    headline: str
    sections: tuple[Section, ...]
    flags: tuple[Flag, ...]
    #: JSON pointers of every masked value
    masked: tuple[str, ...]

    @property
    def line_count(self) -> int:
        """How many lines the sections hold."""
        return sum(len(s.lines) for s in self.sections)


@dataclass(frozen=True, slots=True)
class Shown:
    """A rendering as plain text for a surface that holds at most so many characters."""

    text: str
    #: the text holds the whole call
    whole: bool
    hidden_lines: int = 0
    hidden_chars: int = 0


def render_call(
    tool_name: str, args: Mapping[str, Any], *, watched: Collection[str] = ()
) -> CallRendering:
    """The call `tool_name(args)` as people see it; `watched` names the top-level arguments
    the rule's condition reads, marked on every surface."""
    masked = untrusted.mask_value(dict(args))
    lines = tuple(
        Line(text, number=i + 1)
        for i, text in enumerate(untrusted.to_json(masked, indent=2).splitlines())
    )
    section = Section("tree", "Arguments", lines, watched=bool(set(watched) & set(args)))
    return CallRendering(
        tool=tool_name,
        server=None,
        headline=untrusted.clean(tool_name),
        sections=(section,),
        flags=(),
        masked=(),
    )


def as_text(rendering: CallRendering, *, limit: int | None = None, url: str | None = None) -> Shown:
    """`rendering` as plain text of at most `limit` characters; when it does not fit, the text
    ends by saying how many lines and characters are not shown, and links `url`."""
    parts: list[str] = []
    for section in rendering.sections:
        parts.append(section.title)
        parts.extend(line.text for line in section.lines)
    text = "\n".join(parts)
    if limit is None or len(text) <= limit:
        return Shown(text, True)
    head = text[: max(limit - 200, 0)]
    hidden = text[len(head) :]
    note = f"\n… {hidden.count(chr(10)) + 1} more lines ({len(hidden):,} characters) not shown"
    if url:
        note += f": the whole call is at {url}"
    return Shown(head + note, False, hidden.count("\n") + 1, len(hidden))


def shown_chars(tool_name: str, args: Mapping[str, Any], *, watched: Collection[str] = ()) -> int:
    """How many characters a surface must show to show the call whole: the length of
    `as_text` of its rendering, with no limit. A chat card says how many it holds
    (`Click.args_chars`); it offers Approve, and gate counts its approval, only when this fits,
    so the card and gate's check on an approval measure the same text."""
    return len(as_text(render_call(tool_name, args, watched=watched)).text)
