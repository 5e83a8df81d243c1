"""File edits as unified diffs with line numbers: Edit, MultiEdit, Write, str_replace-style
editors and Codex's apply_patch.

gate does not read the file an edit changes, so the numbers of an Edit are those of the
snippet (its first line is 1) and the title says so; an insert at a known line and a Write
(the whole file) carry the file's own numbers. The whole snippet is shown (context = all of
it): an unchanged line is still part of what the edit matches on.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from gate.rendering.inert import Builder, Call, Piece, one_line, pieces, top_pointer
from gate.rendering.shapes import LineKind, Section

#: past this many old x new lines, no alignment is computed (difflib's matching grows with
#: the product on repetitive text): all old lines are shown deleted, then all new ones added
_ALIGN_CELLS = 4_000_000
#: up to this many old x new lines, the alignment is exact (at most ~50 ms on repetitive text)
_EXACT_CELLS = 250_000
SNIPPET = "numbered within the snippet"
#: str_replace-style commands and the argument holding the text each writes
_EDIT_KEYS = frozenset({"old_string", "new_string", "replace_all"})
#: words in a tool's name that say its `content` is a whole file it writes
_WRITERS = ("write", "create", "save")
EDITOR_COMMANDS = frozenset({"str_replace", "create", "insert", "view", "undo_edit"})


def _title(verb: str, file: str, added: int, deleted: int, note: str = "") -> str:
    return " · ".join(filter(None, [f"{verb} {file}", f"+{added} −{deleted}", note]))


class _Diff:
    """One file's diff section under construction."""

    def __init__(self, call: Call, path: str, file: object | Piece, file_path: str) -> None:
        self.build = Builder(call, "diff", path)
        self.file = file if isinstance(file, Piece) else one_line(str(file), 1024)
        self.added = self.deleted = 0
        if self.file.found or self.file.masked:  # the title shows it escaped; say why here
            self.build.add_piece(self.file._replace(text=f"file: {self.file.text}"), file_path)

    def line(
        self, piece: Piece, path: str, kind: LineKind, old: int | None, new: int | None
    ) -> None:
        """One diff line: `old` and `new` are its numbers on either side (None where absent)."""
        self.added += kind == "add"
        self.deleted += kind == "del"
        number = old if kind == "del" else new
        self.build.add_piece(piece, path, kind=kind, number=number, old_number=old)

    def compare(self, old: str, new: str, old_path: str, new_path: str, first: int = 1) -> None:
        """The whole of `old` against the whole of `new`, numbered from `first`."""
        a, cut_a = pieces(old, self.build.call.limit) if old else ([], 0)
        b, cut_b = pieces(new, self.build.call.limit) if new else ([], 0)
        # A final newline ends the last line; it is no line of its own. It is dropped only
        # where both sides end alike (or one side is empty), so a newline added or removed
        # at the end still shows as a changed line.
        if (old.endswith("\n") or not old) and (new.endswith("\n") or not new):
            a = a[:-1] if a and not a[-1].text and not cut_a else a
            b = b[:-1] if b and not b[-1].text and not cut_b else b
        self.build.plain(f"@@ -{first},{len(a)} +{first},{len(b)} @@", kind="hunk")
        opcodes: Sequence[tuple[str, int, int, int, int]]
        if len(a) * len(b) > _ALIGN_CELLS:
            opcodes = [("delete", 0, len(a), 0, 0), ("insert", len(a), len(a), 0, len(b))]
        else:
            texts_a, texts_b = [p.text for p in a], [p.text for p in b]
            # exact alignment while it is cheap; past that, lines repeated across more than
            # 1% of the text are not used to align (difflib's autojunk), which keeps a
            # hostile run of identical lines linear-ish
            exact = len(a) * len(b) <= _EXACT_CELLS
            matcher = difflib.SequenceMatcher(None, texts_a, texts_b, autojunk=not exact)
            opcodes = matcher.get_opcodes()
        for tag, i1, i2, j1, j2 in opcodes:
            if tag == "equal":
                for k in range(i2 - i1):
                    self.line(b[j1 + k], new_path, "context", first + i1 + k, first + j1 + k)
                continue
            for i in range(i1, i2):
                self.line(a[i], old_path, "del", first + i, None)
            for j in range(j1, j2):
                self.line(b[j], new_path, "add", None, first + j)
        self.build.note_cut(cut_a, old_path)
        self.build.note_cut(cut_b, new_path)

    def done(self, verb: str, note: str = "", *, counts: bool = True) -> Section:
        """The section, titled with its file and (unless `counts` is False) its counts."""
        title = _title(verb, self.file.text, self.added, self.deleted, note)
        if not counts:
            title = " · ".join(filter(None, [f"{verb} {self.file.text}", note]))
        return self.build.done(
            title,
            file=self.file.text,
            added=self.added,
            deleted=self.deleted,
        )


def _file_key(args: Mapping[str, Any]) -> str | None:
    for key in ("file_path", "path", "filePath", "filename", "file"):
        if isinstance(args.get(key), str):
            return key
    return None


def render_edit(call: Call, tool: str, args: Mapping[str, Any]) -> list[str]:
    """Edit / MultiEdit / Write sections; the keys claimed (none if the call is no edit)."""
    file_key = _file_key(args)
    file = args.get(file_key) if file_key else "(no file named)"
    file_path = top_pointer(file_key) if file_key else ""
    claimed = [file_key] if file_key else []
    if isinstance(args.get("old_string"), str) and isinstance(args.get("new_string"), str):
        diff = _Diff(call, "", file, file_path)
        diff.compare(args["old_string"], args["new_string"], "/old_string", "/new_string")
        each = args.get("replace_all") is True
        diff.done("Edit", SNIPPET + (" · every occurrence" if each else ""))
        return [*claimed, "old_string", "new_string", *(["replace_all"] if each else [])]
    edits = args.get("edits")
    if isinstance(edits, list) and edits and all(_is_edit(e) for e in edits):
        for n, edit in enumerate(edits):
            at = f"/edits/{n}"
            diff = _Diff(call, at, file, file_path)
            diff.compare(
                edit["old_string"], edit["new_string"], f"{at}/old_string", f"{at}/new_string"
            )
            every = " · every occurrence" if edit.get("replace_all") is True else ""
            diff.done(f"Edit {n + 1} of {len(edits)}:", SNIPPET + every)
        # an edit with other fields (or replace_all false) is shown whole in the tree too
        return [*claimed, "edits"] if all(_shown_whole(e) for e in edits) else claimed
    content = args.get("content")
    if isinstance(content, str) and file_key and any(w in tool.lower() for w in _WRITERS):
        diff = _Diff(call, "/content", file, file_path)
        diff.compare("", content, "/content", "/content")
        diff.done("Write", "the whole file")
        return [*claimed, "content"]
    return []


def _shown_whole(edit: Mapping[str, Any]) -> bool:
    """Whether an edit's diff section shows all of it (replace_all only when true: the
    title says "every occurrence")."""
    keys = set(edit) - {"old_string", "new_string"}
    return not keys or (keys == {"replace_all"} and edit["replace_all"] is True)


def _is_edit(edit: Any) -> bool:
    return (
        isinstance(edit, Mapping)
        and isinstance(edit.get("old_string"), str)
        and isinstance(edit.get("new_string"), str)
    )


def is_editor_call(tool: str, args: Mapping[str, Any]) -> bool:
    """Whether the call is a str_replace-style editor's (`command` is str_replace, create...)."""
    command = args.get("command")
    if not isinstance(command, str) or command not in EDITOR_COMMANDS:
        return False
    if not isinstance(args.get("path"), str):
        return False
    named = any(word in tool.lower() for word in ("str_replace", "editor", "edit"))
    keys = {"old_str", "new_str", "file_text", "insert_line", "view_range"}
    return named or bool(keys & set(args))


def render_editor(call: Call, args: Mapping[str, Any]) -> list[str]:
    """A str_replace-style editor's section; the keys it showed."""
    command = str(args["command"])
    diff = _Diff(call, "", args["path"], "/path")
    old, new, text, at = (args.get(k) for k in ("old_str", "new_str", "file_text", "insert_line"))
    if command == "str_replace" and isinstance(old, str):
        diff.compare(old, new if isinstance(new, str) else "", "/old_str", "/new_str")
        diff.done("Replace in", SNIPPET)
        return ["command", "path", "old_str", *(["new_str"] if isinstance(new, str) else [])]
    if command == "create" and isinstance(text, str):
        diff.compare("", text, "/file_text", "/file_text")
        diff.done("Create", "the whole file")
        return ["command", "path", "file_text"]
    if command == "insert" and isinstance(new, str) and type(at) is int and at >= 0:
        diff.compare("", new, "/new_str", "/new_str", first=at + 1)
        diff.done("Insert into", f"after line {at}")
        return ["command", "path", "insert_line", "new_str"]
    verb = {"view": "View", "undo_edit": "Undo the last edit of"}.get(command, command)
    diff.done(verb, counts=False)
    return ["command", "path"]


def find_patch(args: Mapping[str, Any]) -> tuple[str, str] | None:
    """(key, patch text) of an apply_patch call: `input`, `patch` or `command` (Codex sends
    the patch in `command`, or as argv ["apply_patch", patch])."""
    for key in ("input", "patch", "command", "patch_text", "patchText", "diff"):
        value = args.get(key)
        if isinstance(value, list) and len(value) == 2 and value[0] == "apply_patch":
            value = value[1]
        if isinstance(value, str) and value.lstrip()[:15] == "*** Begin Patch":
            return key, value
    return None


def render_patch(call: Call, key: str, patch: str) -> None:
    """One diff section per file of an apply_patch patch (numbered within the patch)."""
    path = top_pointer(key)
    parts, cut = pieces(patch, call.limit)
    if len(parts) > 1 and not parts[-1].text:
        parts.pop()  # the newline that ends the last line
    files: list[tuple[str, Piece, list[Piece]]] = []  # (verb, file name, body lines)
    loose: list[Piece] = []  # lines outside any file section
    ended = False  # past "*** End Patch", a line belongs to no file
    for piece in parts:
        header = None if ended else _header(piece)
        if header:
            files.append((*header, []))
        elif piece.text.strip() in ("*** Begin Patch", "*** End Patch") and not ended:
            ended = piece.text.strip() == "*** End Patch"
        elif files and not ended:
            files[-1][2].append(piece)
        else:
            loose.append(piece)
    for verb, name, body in files:
        _patch_file(call, path, verb, name, body)
    if loose or cut:
        build = Builder(call, "text", path)
        for piece in loose:
            build.add_piece(piece, path)
        build.note_cut(cut, path)
        build.done("Outside the patch's file sections")


def _header(piece: Piece) -> tuple[str, Piece] | None:
    """(verb, file name) of a patch's file header line."""
    for marker, verb in (
        ("*** Add File: ", "Add"),
        ("*** Update File: ", "Update"),
        ("*** Delete File: ", "Delete"),
    ):
        if piece.text.startswith(marker):
            return verb, piece._replace(text=piece.text[len(marker) :])
    return None


_PATCH_KINDS: dict[str, LineKind] = {"+": "add", "-": "del", " ": "context"}


def _patch_file(call: Call, path: str, verb: str, name: Piece, body: Sequence[Piece]) -> None:
    diff = _Diff(call, path, name, path)
    old = new = 0
    moved = ""
    for piece in body:
        text = piece.text
        if text.startswith("*** Move to: "):
            moved = text[len("*** Move to: ") :]
            diff.build.add_piece(piece, path)
        elif text.startswith("@@"):
            diff.build.add_piece(piece, path, kind="hunk")
        elif verb == "Add" and text.startswith("+"):
            new += 1
            diff.line(piece._replace(text=text[1:]), path, "add", None, new)
        elif text[:1] in ("+", "-", " ") and verb == "Update":
            kind: LineKind = _PATCH_KINDS[text[0]]
            old += kind != "add"
            new += kind != "del"
            shown = piece._replace(text=text[1:])
            diff.line(
                shown, path, kind, old if kind != "add" else None, new if kind != "del" else None
            )
        else:  # "*** End of File", or text the format has no place for: shown as it is
            diff.build.add_piece(piece, path)
    notes = [f"moved to {moved}"] if moved else []
    if verb == "Update":
        notes.append("numbered within the patch")
    if verb == "Delete":
        diff.build.plain("(the whole file is deleted)")
    if verb in ("Add", "Delete"):
        notes.append("the whole file")
    diff.done(verb, " · ".join(notes), counts=verb != "Delete")
