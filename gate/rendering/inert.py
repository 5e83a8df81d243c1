"""Untrusted text made into inert lines, each flagged where something hides in it.

A value is capped (`untrusted.SCAN_LIMIT`), masked as a whole (a private key spans lines),
split at newlines, and each line shown with invisible characters, bidi controls and
look-alike letters written as `\\uXXXX` escapes. Nothing is stripped: whatever was escaped,
masked or cut is said in a flag on the line it occurs on. Every renderer builds its lines
through `Builder`, so no section can show raw text.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from gate.rendering.shapes import Flag, FlagKind, Line, LineKind, Section, SectionKind
from gate.text import untrusted

#: a line longer than this is flagged: it runs off a card or a terminal, and text past the
#: edge is text nobody reads
LONG_LINE = 400
#: direction controls: they reorder what follows them ("Trojan Source")
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
#: how many distinct characters a flag names before it says "..."
_NAMED = 3
#: flags of one kind kept per section: a hostile 10,000-line command flagged on every line
#: gets its lines marked, not 10,000 warnings
_FLAGS_PER_KIND = 50
#: how much of a JSON pointer a flag's sentence shows
_PATH_SHOWN = 200


def _escape(code: int) -> str:
    return json.dumps(chr(code))[1:-1]


class _Table(dict[int, Any]):
    """A `str.translate` table escaping the code points `hides` says, decided on first sight
    (bounded like `gate.text.glyphs`' tables: past 65,536 entries it stops caching)."""

    def __init__(self, hides: Any) -> None:
        super().__init__()
        self.hides = hides

    def __missing__(self, code: int) -> Any:
        value = _escape(code) if self.hides(chr(code)) else code
        if len(self) < 65_536:
            self[code] = value
        return value


_SURROGATES = _Table(lambda c: unicodedata.category(c) == "Cs")
_INVISIBLE = _Table(untrusted.is_invisible)


def pointer(parent: str, key: object) -> str:
    """The JSON pointer of `key` under `parent` (RFC 6901: `~` and `/` escaped)."""
    return f"{parent}/{str(key).replace('~', '~0').replace('/', '~1')}"


def top_pointer(key: object) -> str:
    """The pointer of a top-level argument, its key as `gate.text.untrusted` shows it (a secret in
    a key masked: a pointer never carries one)."""
    return pointer("", untrusted.mask_text(str(key)))


def shown_path(path: str) -> str:
    """A JSON pointer as a flag's sentence shows it: inert, at most `_PATH_SHOWN` characters."""
    if not path:
        return "the call"
    text = one_line(path[:_PATH_SHOWN], None).text
    return text + ("…" if len(path) > _PATH_SHOWN else "")


def _named(chars: AbstractSet[str]) -> str:
    names = [
        f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed').lower()}" for c in sorted(chars)[:_NAMED]
    ]
    more = ", ..." if len(chars) > _NAMED else ""
    return ", ".join(names) + more


class Piece(NamedTuple):
    """One line of a value, inert, with what was found in it (flag kind, words)."""

    text: str
    found: tuple[tuple[FlagKind, str], ...] = ()
    masked: bool = False


def _hidden_words(here: frozenset[str]) -> tuple[tuple[FlagKind, str], ...]:
    """What a line holding the invisible characters `here` is flagged with."""
    bidi = here & BIDI
    lone = {c for c in here if 0xD800 <= ord(c) <= 0xDFFF}
    other = here - bidi - lone
    found: list[tuple[FlagKind, str]] = []
    if bidi:
        found.append(("bidi", f"a direction control ({_named(bidi)}), shown escaped"))
    if other:
        found.append(("invisible", f"invisible characters ({_named(other)}), shown escaped"))
    if lone:
        found.append(("invisible", "a lone surrogate (not a character), shown escaped"))
    return tuple(found)


class _Scan:
    """What one value holds, worked out once so that each of its lines costs little: the
    invisible characters it has (most values have none), the flags each set of them gives."""

    def __init__(self, text: str) -> None:
        # the cached translate table answers "any at all?" at C speed; most text has none
        plain = text.isascii() and text.isprintable() or text.translate(_INVISIBLE) == text
        hidden = () if plain else (c for c in set(text) if untrusted.is_invisible(c))
        self.hidden = frozenset(hidden)
        self.words: dict[frozenset[str], tuple[tuple[FlagKind, str], ...]] = {}

    def line(self, raw: str, masked: str) -> tuple[str, tuple[tuple[FlagKind, str], ...]]:
        """`masked` (the shown form of the raw line `raw`) escaped, and its findings."""
        found: tuple[tuple[FlagKind, str], ...] = ()
        shown = masked
        if self.hidden:
            here = frozenset(raw) & self.hidden
            if here:
                if here not in self.words:
                    self.words[here] = _hidden_words(here)
                found = self.words[here]
            shown = masked.translate(_INVISIBLE)
        if not shown.isascii():
            alike = untrusted.escape_lookalikes(shown)
            if alike != shown:
                kept = set(alike)
                letters = {c for c in set(shown) if not c.isascii() and c not in kept}
                detail = f" ({_named(letters)})" if letters else ""
                words = f"look-alike letters from another script{detail}, shown escaped"
                found = (*found, ("lookalike", words))
                shown = alike
        if len(shown) > LONG_LINE:
            found = (*found, ("long_line", f"{len(shown):,} characters long"))
        return shown, found


def _plain(line: str) -> Piece:
    if len(line) > LONG_LINE:
        return Piece(line, (("long_line", f"{len(line):,} characters long"),))
    return Piece(line)


def pieces(value: str, limit: int | None) -> tuple[list[Piece], int]:
    """The lines of `value` as shown, and how many of its characters were cut (0 if none)."""
    if value.isascii() and value.isprintable() and (limit is None or len(value) <= limit):
        # one line of plain ASCII (most keys and values): nothing hides in it but a secret
        masked = untrusted.mask_text(value, None)
        if masked == value:
            return [_plain(value)], 0
        hides = masked.count(untrusted.MASK) > value.count(untrusted.MASK)
        return [Piece(masked, _plain(masked).found, hides)], 0
    capped = untrusted.cap(value, limit)
    cut = len(value) - len(capped) if capped != value else 0
    scan = _Scan(capped)
    lone = any(0xD800 <= ord(c) <= 0xDFFF for c in scan.hidden)
    safe = capped.translate(_SURROGATES) if lone else capped  # RE2 reads UTF-8
    masked = untrusted.mask_text(safe, None)
    raw_lines, lines = capped.split("\n"), masked.split("\n")
    # a mask over several lines (a PEM key) joins them: then lines are read as masked
    aligned = len(raw_lines) == len(lines)
    masks = untrusted.MASK in masked
    if not scan.hidden and not masks and masked.isascii():  # most values: nothing to find
        return [_plain(line) for line in lines], cut
    out: list[Piece] = []
    for i, line in enumerate(lines):
        raw = raw_lines[i] if aligned else line
        text, found = scan.line(raw, line)
        hides = masks and line.count(untrusted.MASK) > raw.count(untrusted.MASK)
        out.append(Piece(text, found, hides or (masks and not aligned and untrusted.MASK in line)))
    if lone and not aligned:
        words: tuple[FlagKind, str] = (
            "invisible",
            "lone surrogates (not characters), shown escaped",
        )
        out[0] = Piece(out[0].text, (*out[0].found, words), out[0].masked)
    return out, cut


def one_line(value: str, limit: int | None) -> Piece:
    """`value` as one inert line (a key, a file name): its lines joined by a visible `⏎`."""
    parts, _ = pieces(value, limit)
    found = tuple(f for p in parts for f in p.found)
    if len(parts) > 1:
        found = (*found, ("invisible", "line breaks, shown as ⏎"))
    return Piece(" ⏎ ".join(p.text for p in parts), found, any(p.masked for p in parts))


@dataclass
class Call:
    """What a whole call collects while its sections are built."""

    limit: int | None
    watched: frozenset[str]
    flags: list[Flag] = field(default_factory=list)
    #: the masked pointers, in order (a dict: a call may mask thousands)
    masked: dict[str, None] = field(default_factory=dict)
    cut: bool = False
    sections: list[Section] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)

    def mask(self, path: str) -> None:
        """Record that the value at `path` is masked (once)."""
        self.masked.setdefault(path)

    def flag(self, kind: FlagKind, message: str, path: str = "") -> None:
        """A flag on the call as a whole."""
        self.flags.append(Flag(kind, message, path))

    def shown_path(self, path: str) -> str:
        """`shown_path(path)`, worked out once per path."""
        shown = self.paths.get(path)
        if shown is None:
            shown = self.paths[path] = shown_path(path)
        return shown

    def is_watched(self, path: str) -> bool:
        """Whether the rule's condition reads the top-level argument `path` lies under."""
        if not self.watched or not path.startswith("/"):
            return False
        top = path[1:].partition("/")[0]
        return top.replace("~1", "/").replace("~0", "~") in self.watched


class Builder:
    """The lines of one section, each made inert and flagged as it is added."""

    def __init__(self, call: Call, kind: SectionKind, path: str = "") -> None:
        self.call, self.kind, self.path = call, kind, path
        self.index = len(call.sections)
        self.lines: list[Line] = []
        self.flags: list[Flag] = []
        self.counts: dict[str, int] = {}

    def add_piece(
        self,
        piece: Piece,
        path: str,
        *,
        kind: LineKind = "plain",
        number: int | None = None,
        old_number: int | None = None,
        depth: int = 0,
        prefix: str = "",
    ) -> None:
        """One inert line showing (part of) the value at `path`."""
        found = piece.found
        if piece.masked:
            self.call.mask(path)
            found = (*found, ("masked", "a secret is masked"))
        for flag_kind, words in found:
            self.flag(flag_kind, words, path, number)
        self.lines.append(
            Line(
                prefix + piece.text,
                kind,
                number,
                old_number,
                flagged=bool(piece.found),
                masked_path=path if piece.masked else None,
                watched=self.call.is_watched(path),
                depth=depth,
            )
        )

    def flag(self, kind: FlagKind, words: str, path: str, number: int | None) -> None:
        """Flag the line about to be added, unless this section already holds
        `_FLAGS_PER_KIND` of its kind: every flagged line is still marked (`Line.flagged`),
        and one last flag says how many more."""
        count = self.counts.get(kind, 0) + 1
        self.counts[kind] = count
        if count > _FLAGS_PER_KIND:
            return
        where = self.call.shown_path(path)
        if number is not None:
            where = f"line {number} of {where}"
        position = len(self.lines) + 1
        self.flags.append(Flag(kind, f"{where}: {words}", path, position, self.index))

    def add_text(
        self,
        value: str,
        path: str,
        *,
        first: int = 1,
        inspect: Callable[[list[Piece]], list[Piece]] | None = None,
    ) -> int:
        """Every line of the value `value` at `path`, numbered from `first` (`inspect` may
        add findings to them: the hosts of URLs in a command); how many."""
        parts, cut = pieces(value, self.call.limit)
        if inspect is not None:
            parts = inspect(parts)
        watched = self.call.is_watched(path)
        for i, piece in enumerate(parts):
            if piece.found or piece.masked:
                self.add_piece(piece, path, number=first + i)
            else:  # the common line, without the flag bookkeeping (a value may have 10,000)
                self.lines.append(Line(piece.text, "plain", first + i, None, False, None, watched))
        self.note_cut(cut, path)
        return len(parts)

    def note_cut(self, cut: int, path: str) -> None:
        """Flag that `cut` characters of the value at `path` are not shown."""
        if cut:
            self.call.cut = True
            self.flags.append(
                Flag(
                    "cut",
                    f"{self.call.shown_path(path)}: {cut:,} more characters are not shown",
                    path,
                    len(self.lines) or None,
                    self.index,
                )
            )

    def plain(self, text: str, *, kind: LineKind = "plain", depth: int = 0) -> None:
        """A line gate wrote itself (a hunk header, a marker): shown as is."""
        self.lines.append(Line(text, kind, depth=depth))

    def done(self, title: str, **extra: Any) -> Section:
        """The section, added to the call with its flags."""
        for kind, count in self.counts.items():
            if count > _FLAGS_PER_KIND:
                more = f"{count - _FLAGS_PER_KIND:,} more lines of this section are flagged"
                self.flags.append(Flag(cast(FlagKind, kind), more, self.path, None, self.index))
        watched = self.call.is_watched(self.path) or any(line.watched for line in self.lines)
        section = Section(self.kind, title, tuple(self.lines), self.path, watched, **extra)
        self.call.sections.append(section)
        self.call.flags.extend(self.flags)
        return section
