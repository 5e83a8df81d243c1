"""Any JSON as a readable tree: `key: value` lines, nested by indentation, a multi-line string
as its own lines (never one JSON string with literal `\\n`).

A scalar string is shown bare unless it would read as something else (`""`, `"42"`,
`"true"`, leading or trailing spaces), then in quotes. Values under secret-named keys show as
`[masked]`, with the line marked for a reveal. Past `untrusted.MAX_DEPTH` levels a value is
a marker, flagged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gate.rendering.inert import Builder, Call, Piece, one_line, pieces, pointer
from gate.rendering.urls import flag_urls, host_findings, is_url
from gate.text import untrusted

_WORDS = frozenset({"null", "true", "false", "{}", "[]"})


def _number(value: int | float) -> str:
    try:
        return json.dumps(value)  # NaN and Infinity as Python's json writes them
    except ValueError:  # an int past Python's 4,300-digit str limit
        return f"(an integer of {value.bit_length():,} bits)" if isinstance(value, int) else "?"


def _quoted(text: str) -> bool:
    """Whether a one-line string must be quoted to read as a string."""
    if not text or text != text.strip() or text in _WORDS or text.startswith(('"', "- ")):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Tree:
    """The walk that writes a tree section's lines."""

    def __init__(self, build: Builder) -> None:
        self.build = build
        self.limit = build.call.limit

    def entry(self, label: Piece, value: Any, path: str, depth: int) -> None:
        """`label` (`key: ` or `- `, already indented) followed by `value`."""
        if depth > untrusted.MAX_DEPTH:
            self.line(label, Piece(untrusted.TOO_DEEP), path, depth)
            self.build.note_cut(1, path)
            return
        if isinstance(value, Mapping):
            if not value:
                self.line(label, Piece("{}"), path, depth)
                return
            self.line(label, Piece(""), path, depth)
            self.mapping(value, path, depth + 1)
        elif isinstance(value, list | tuple):
            if not value:
                self.line(label, Piece("[]"), path, depth)
                return
            self.line(label, Piece(""), path, depth)
            self.sequence(value, path, depth + 1)
        elif isinstance(value, str):
            self.string(label, value, path, depth)
        elif value is None or isinstance(value, bool):
            self.line(label, Piece(json.dumps(value)), path, depth)
        elif isinstance(value, int | float):
            self.line(label, Piece(_number(value)), path, depth)
        else:  # not JSON (a Python caller's object): its text
            self.string(label, str(value), path, depth)

    def string(self, label: Piece, value: str, path: str, depth: int) -> None:
        parts, cut = pieces(value, self.limit)
        if is_url(value):
            _, found = host_findings(value)
            parts[0] = parts[0]._replace(found=(*parts[0].found, *found))
        else:
            parts = flag_urls(parts)
        if len(parts) == 1:
            piece = parts[0]
            if _quoted(piece.text):
                piece = Piece(f'"{piece.text}"', piece.found, piece.masked)
            self.line(label, piece, path, depth, number=1)
        else:
            self.line(label, Piece("|"), path, depth)
            indent = "  " * (depth + 1)
            for i, piece in enumerate(parts):
                self.build.add_piece(piece, path, number=i + 1, depth=depth + 1, prefix=indent)
        self.build.note_cut(cut, path)

    def line(
        self, label: Piece, value: Piece, path: str, depth: int, number: int | None = None
    ) -> None:
        text = label.text + value.text if value.text else label.text.rstrip()
        joined = Piece(text, label.found + value.found, label.masked or value.masked)
        self.build.add_piece(joined, path, number=number, depth=depth)

    def mapping(self, value: Mapping[Any, Any], path: str, depth: int) -> None:
        self.keys(value, value.keys(), path, depth)

    def keys(self, value: Mapping[Any, Any], keys: Iterable[Any], path: str, depth: int) -> None:
        """The entries of `value` named by `keys`, each as `key: value`. A key is addressed
        as `gate.text.untrusted` shows it (a secret in it masked, two that mask alike numbered),
        so a pointer never carries a secret and every surface names an entry alike."""
        # one rule for how keys are shown and addressed: untrusted's (masks, reveal)
        names = {key: shown for shown, key in untrusted.shown_keys(value, untrusted.SCAN_LIMIT)}
        for key in keys:
            name = names[key]
            masks = name != str(key) and untrusted.MASK in name
            # shown as masked when a secret is in it, else as typed (a lone surrogate escaped
            # and flagged, where untrusted's form has U+FFFD)
            label = one_line(name if masks else str(key), self.limit)
            found = label.found
            if masks:
                found = (*found, ("masked", "a secret in this key is masked (not revealable)"))
            label = Piece(f"{'  ' * depth}{label.text}: ", found)
            at = pointer(path, name)
            item = value[key]
            if untrusted.is_secret_key(str(key)) and item not in (None, ""):
                self.line(label, Piece(untrusted.MASK, (), True), at, depth)
            else:
                self.entry(label, item, at, depth)

    def sequence(self, value: list[Any] | tuple[Any, ...], path: str, depth: int) -> None:
        for i, item in enumerate(value):
            self.entry(Piece(f"{'  ' * depth}- "), item, pointer(path, i), depth)


def render_tree(call: Call, args: Any, keys: list[Any] | None, title: str) -> None:
    """A tree section of `args` (only `keys` of it when it is a mapping and they are given)."""
    build = Builder(call, "tree", "")
    tree = _Tree(build)
    if isinstance(args, Mapping):
        tree.keys(args, list(args) if keys is None else keys, "", 0)
    elif isinstance(args, list | tuple) and args:
        tree.sequence(args, "", 0)
    else:
        tree.entry(Piece(""), args, "", 0)
    build.done(title)
