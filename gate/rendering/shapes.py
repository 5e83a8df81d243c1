"""The types of a rendered call: sections of typed lines, flags, masked pointers.

Every surface codes against these (through `gate.rendering`, which re-exports them); the
renderers in the sibling modules build them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: what a section shows
SectionKind = Literal["command", "diff", "url", "sql", "tree", "text"]
#: how a line reads: diff lines are "add", "del", "context" or "hunk"
LineKind = Literal["plain", "add", "del", "context", "hunk"]
#: what a flag warns of; "cut" is a value longer than the scan limit or nested deeper than
#: `untrusted.MAX_DEPTH`, shown only in part
FlagKind = Literal["invisible", "bidi", "lookalike", "long_line", "masked", "cut"]


@dataclass(frozen=True, slots=True)
class Flag:
    """Something about the call an approver must not miss, said where it occurs."""

    kind: FlagKind
    #: the sentence every surface shows ("line 2 of /command: a right-to-left override
    #: (U+202E), shown as \\u202e")
    message: str
    #: JSON pointer of the argument it is in ("/command"); "" for the call as a whole
    path: str = ""
    #: 1-based position in its section's `lines` of the line it is on, when it is on one
    line: int | None = None
    #: index in `CallRendering.sections` of the section it is in, when it is in one
    section: int | None = None


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
    #: the rule's condition reads the argument this line shows
    watched: bool = False
    #: how deep in a tree this line sits (0 at the top); surfaces may indent by it, the text
    #: already carries two spaces per level
    depth: int = 0


@dataclass(frozen=True, slots=True)
class Section:
    """One part of a call: a command, one file's diff, a URL, a statement, a tree."""

    kind: SectionKind
    #: gate's heading for it ("Command · 2 lines", "Edit src/app.py · +3 −1")
    title: str
    lines: tuple[Line, ...]
    #: JSON pointer of the argument it shows ("" for several)
    path: str = ""
    #: the rule's condition reads this argument (or, for a tree, one of those it shows)
    watched: bool = False
    #: a URL section's host, set apart from the rest of the URL
    host: str | None = None
    #: a diff section's file, as shown (inert)
    file: str | None = None
    #: a diff section's count of added and deleted lines
    added: int = 0
    deleted: int = 0


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
    #: every character of every argument is shown: nothing was cut (scan limit, nesting) and
    #: no mask could hide more than a credential (`untrusted.masks_only_credentials`)
    whole: bool = True

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
