"""A call as the console shows it: `gate.rendering` shaped for the templates.

The console never writes its own reading of a call's arguments: each page renders the call
through `gate.rendering.render_call` with the arguments the rule's condition reads, and this
module only arranges that rendering for HTML (which flag sits beside which line, how much of
it a queue row shows and how much it does not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gate import rendering
from gate.decisions.readmodel import RequestView
from gate.policy.offers import Offers
from gate.rendering import CallRendering, Flag, Line, Section
from gate.text import untrusted

#: lines of a call a queue row shows before it says how many more there are
ROW_LINES = 8
#: characters of the agent's summary a queue row shows before it says how many more there are
ROW_SUMMARY = 280


@dataclass(frozen=True, slots=True)
class ShownLine:
    """One line of a section with the flags that point at it."""

    line: Line
    flags: tuple[Flag, ...]


@dataclass(frozen=True, slots=True)
class ShownSection:
    """One section with its lines (each with its flags)."""

    section: Section
    lines: tuple[ShownLine, ...]


@dataclass(frozen=True, slots=True)
class ShownCall:
    """A rendering arranged for a page: sections with flags beside their lines."""

    rendering: CallRendering
    sections: tuple[ShownSection, ...]
    #: flags the call has as a whole, or that no shown line holds
    loose_flags: tuple[Flag, ...]
    #: the arguments the rule's condition reads
    watched: tuple[str, ...]
    condition_error: str | None
    #: why every call of its agent is asked (gate.decisions.denials), when it tripped
    tripped: str | None = None

    @property
    def line_count(self) -> int:
        """How many lines the call's sections hold."""
        return self.rendering.line_count


@dataclass(frozen=True, slots=True)
class RowPreview:
    """What a queue row shows of a call: its first lines, and how many it leaves out."""

    sections: tuple[ShownSection, ...]
    hidden_lines: int


def render(
    view: RequestView, args: Mapping[str, Any] | None = None, *, whole: bool = False
) -> CallRendering:
    """`view`'s call (or the same tool with `args`) as gate renders it, watched arguments
    marked; `whole` shows every character of every value (the request page, where calls too
    long for a card are approved), else each value up to the scan limit (the queue)."""
    return rendering.render_call(
        view.tool_name,
        view.tool_args if args is None else args,
        watched=view.offers.watched_args,
        limit=None if whole else untrusted.SCAN_LIMIT,
    )


def shown(
    view: RequestView, args: Mapping[str, Any] | None = None, *, whole: bool = False
) -> ShownCall:
    """`view`'s call arranged for the request page (`whole`) or a queue row."""
    return arrange(render(view, args, whole=whole), view.offers)


def arrange(call: CallRendering, offers: Offers) -> ShownCall:
    """`call` with each flag set beside the line it names; the rest kept for the header."""
    placed: set[int] = set()
    sections: list[ShownSection] = []
    for index, section in enumerate(call.sections):
        lines: list[ShownLine] = []
        for position, line in enumerate(section.lines, start=1):
            here = []
            for i, flag in enumerate(call.flags):
                if i not in placed and flag.line == position and _in(flag, index, section):
                    here.append(flag)
                    placed.add(i)
            lines.append(ShownLine(line, tuple(here)))
        sections.append(ShownSection(section, tuple(lines)))
    loose = tuple(f for i, f in enumerate(call.flags) if i not in placed)
    return ShownCall(
        rendering=call,
        sections=tuple(sections),
        loose_flags=loose,
        watched=tuple(offers.watched_args),
        condition_error=offers.condition_error,
        tripped=offers.tripped,
    )


def _in(flag: Flag, index: int, section: Section) -> bool:
    """Whether `flag` points into `section`, the `index`th: by the section the flag names
    when it names one, else by its argument's path (a flag without a path, into any)."""
    named = getattr(flag, "section", None)
    if named is not None:
        return bool(named == index)
    if not flag.path or not section.path:
        return True
    return flag.path == section.path or flag.path.startswith(section.path + "/")


#: the lines of a diff a queue row shows: what changes, not the context around it
_CHANGES = frozenset({"add", "del", "hunk"})


def preview(call: ShownCall, limit: int = ROW_LINES) -> RowPreview:
    """The first `limit` lines of `call` across its sections (of a diff, its changed lines),
    never cut inside a line: what does not fit is counted, and the row says so."""
    left = limit
    sections: list[ShownSection] = []
    for shown_section in call.sections:
        if left <= 0:
            break
        lines = shown_section.lines
        if shown_section.section.kind == "diff":
            lines = tuple(sl for sl in lines if sl.line.kind in _CHANGES)
        kept = lines[:left]
        left -= len(kept)
        sections.append(ShownSection(shown_section.section, kept))
    hidden = call.line_count - sum(len(s.lines) for s in sections)
    return RowPreview(tuple(sections), hidden)


def summary_cut(summary: str | None, limit: int = ROW_SUMMARY) -> tuple[str, int]:
    """The agent's summary for a queue row and how many characters it leaves out."""
    text = summary or ""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit
