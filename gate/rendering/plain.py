"""A rendering as plain text: the headline, and `as_text` for cards and the terminal.

`as_text` writes section titles, numbered lines, diff markers (`+`, `-`) and each flag as a
`⚠` line right after the line it is on. With a limit it cuts at a line boundary and ends by
saying how many lines and characters are not shown (and, given a URL, where the whole call
is): never a silent cut. The same rendering always gives the same text.
"""

from __future__ import annotations

from collections.abc import Sequence

from gate.rendering.shapes import CallRendering, Flag, Line, Section, Shown

#: how long the headline's description of the call may grow before it is cut with "…"
HEADLINE_DETAIL = 160
#: a title's mark for an argument the rule's condition reads
WATCHED = " · the rule reads this"
WATCHED_LINE = "   ← the rule reads this"
#: the fewest characters of a line that does not fit worth showing (cut, with "…")
_PART = 20
_MARKS = {"add": "+", "del": "-", "context": " "}


def _cut(text: str, room: int = HEADLINE_DETAIL) -> str:
    return text if len(text) <= room else text[: room - 1].rstrip() + "…"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _short(text: str) -> str:
    """A tree line for the headline: a key whose value is on the lines below reads `key: …`."""
    text = text.removesuffix(" |").strip()
    return f"{text} …" if text.endswith(":") or text == "-" else text


def headline(tool: str, server: str | None, sections: Sequence[Section]) -> str:
    """One line in gate's words saying what the call does (inert: built from shown text)."""
    name = f"mcp: {server} · {tool}" if server else tool
    if not sections:
        return f"{name} (no arguments)"
    first = sections[0]
    texts = [line.text for line in first.lines]
    if first.kind in ("command", "sql"):
        what = "SQL " if first.kind == "sql" else ""
        if len(texts) > 1:
            # the first lines fill the room; joining 10,000 would only be cut away
            joined = " ⏎ ".join(texts[: HEADLINE_DETAIL // 2])
            return f"{name} · {what}{_plural(len(texts), 'line')}: " + _cut(joined)
        return f"{name}: {what}{_cut(texts[0]) if texts and texts[0].strip() else '(empty)'}"
    if first.kind == "diff":
        files = [s for s in sections if s.kind == "diff"]
        added, deleted = sum(s.added for s in files), sum(s.deleted for s in files)
        if len(files) > 1 and len({s.file for s in files}) == 1:
            return (
                f"{name} {_cut(first.file or '', 120)} · {len(files)} edits (+{added} −{deleted})"
            )
        if len(files) == 1:
            counts = f" (+{added} −{deleted})" if f"+{first.added} −" in first.title else ""
            head = first.title.split(" · ")[0]
            if head.startswith(f"{tool} "):  # Edit, Write: the verb is the tool's name
                return f"{name} {_cut(first.file or '', 120)}{counts}"
            return f"{name}: {_cut(head, 160)}{counts}"
        listed = ", ".join(dict.fromkeys(s.file or "" for s in files))
        return f"{name} {len(files)} files (+{added} −{deleted}): {_cut(listed)}"
    if first.kind == "url":
        url = _cut(texts[0] if texts else "", 120)
        return f"{name} {first.host} ({url})" if first.host else f"{name} {url}"
    top = [_short(line.text) for line in first.lines if line.depth == 0]
    if not top:
        return f"{name} (no arguments)"
    return f"{name}: " + _cut(" · ".join(top))


def _line_text(section: Section, line: Line, width: int) -> str:
    if section.kind in ("command", "sql") and line.number is not None:
        return f"{line.number:>{width}}  {line.text}"
    if section.kind == "diff":
        if line.kind == "hunk":
            return line.text
        number = "" if line.number is None else str(line.number)
        return f"{number:>{width}} {_MARKS.get(line.kind, ' ')} {line.text}"
    return line.text


def _lines(rendering: CallRendering) -> tuple[list[str], list[bool]]:
    """Every line of the text form, before any cut, and for each whether it is a warning
    glued to the line before it (a cut never falls between a line and its warnings)."""
    out = [f"⚠ {flag.message}" for flag in rendering.flags if flag.section is None]
    glued = [False] * len(out)
    by_line: dict[tuple[int, int | None], list[Flag]] = {}
    for flag in rendering.flags:
        if flag.section is not None:
            by_line.setdefault((flag.section, flag.line), []).append(flag)
    for index, section in enumerate(rendering.sections):
        if index or out:
            out.append("")
            glued.append(False)
        # a tree marks each argument the rule reads on its own line; another section as a whole
        tree = section.kind == "tree"
        out.append(section.title + (WATCHED if section.watched and not tree else ""))
        glued.append(False)
        numbers = [line.number for line in section.lines if line.number is not None]
        width = len(str(max(numbers))) if numbers else 1
        texts = [_line_text(section, line, width) for line in section.lines]
        if tree:
            texts = [
                text + WATCHED_LINE if line.watched and not line.depth else text
                for text, line in zip(texts, section.lines, strict=True)
            ]
        done = 0  # lines up to each flagged one go in at once: a section may have 10,000
        for position in sorted(p for i, p in by_line if i == index and p is not None):
            out.extend(texts[done:position])
            glued.extend([False] * (position - done))
            warnings = [f"⚠ {flag.message}" for flag in by_line[(index, position)]]
            out.extend(warnings)
            glued.extend([True] * len(warnings))
            done = position
        out.extend(texts[done:])
        glued.extend([False] * (len(texts) - done))
        out.extend(f"⚠ {flag.message}" for flag in by_line.get((index, None), ()))
        glued.extend([False] * (len(out) - len(glued)))
    return out, glued


def _note(lines: int, chars: int, url: str | None) -> str:
    note = f"… {_plural(lines, 'more line')} ({_plural(chars, 'character')}) not shown"
    return note + (f": the whole call is at {url}" if url else "")


def as_text(rendering: CallRendering, *, limit: int | None = None, url: str | None = None) -> Shown:
    """`rendering` as plain text of at most `limit` characters; when it does not fit, the text
    ends by saying how many lines and characters are not shown, and links `url`."""
    lines, glued = _lines(rendering)
    if not rendering.whole and url:
        lines.append(f"Parts of this call are not shown here: the whole call is at {url}")
        glued.append(False)
    text = "\n".join(lines)
    if limit is None or len(text) <= limit:
        return Shown(text, rendering.whole)
    # the note for everything hidden is the longest a note can be: reserve its length
    reserve = len(_note(len(lines), len(text), url)) + 1
    kept: list[str] = []
    size = 0
    for line in lines:
        grown = size + len(line) + (1 if kept else 0)
        if grown + reserve > limit:
            break
        kept.append(line)
        size = grown
    while kept and len(kept) < len(lines) and glued[len(kept)]:  # a line goes with its warnings
        kept.pop()
    size = len("\n".join(kept))
    whole_lines = len(kept)
    # the line that did not fit: its start, with its warnings, when there is room for a
    # useful part of it
    end = whole_lines + 1
    while end < len(lines) and glued[end]:
        end += 1
    warnings = lines[whole_lines + 1 : end]
    room = limit - reserve - size - (1 if kept else 0) - 1 - sum(len(w) + 1 for w in warnings)
    partial = room >= _PART
    if partial:
        kept += [lines[whole_lines][:room] + "…", *warnings]
        size = len("\n".join(kept)) - 1  # the "…" is gate's, not the call's
    hidden_lines = len(lines) - len(kept) + partial  # a line shown in part is not shown
    note = _note(hidden_lines, len(text) - size, url)
    cut = "\n".join([*kept, note])
    return Shown(cut[:limit], False, hidden_lines, len(text) - size)
