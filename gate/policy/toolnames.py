"""Tool names as policy compares them: one canonical form, so a look-alike cannot escape a rule.

A rule for `Bash` must also catch `bash`, fullwidth `Ｂａｓｈ`, `Bаsh` with a Cyrillic "а" and
`Bash` with a zero-width space in it: an agent runtime or an MCP upstream that looks names up
loosely runs the same tool for each. `canonical` folds a name (or a rule's glob) to one form:

1. NFKC (fullwidth and mathematical letters, ligatures become plain ones);
2. invisible characters (`gate.text.glyphs.is_invisible`) and white space removed;
3. each letter that Unicode's confusables data (UTS #39) says reads as ASCII replaced by that
   ASCII (Cyrillic "а" -> "a", Greek "Ο" -> "O"): the table `lookalikes.txt` beside this
   module, made from the `confusable_homoglyphs` package's data (a development dependency; a
   test checks the table is what that data gives);
4. case folded.

`match` is the one place a rule's globs meet a tool name (`gate.policy.rules` calls it for every
rule). Matching the canonical form widens what a rule catches, which is only safe in one
direction: an `ask` or `deny` rule catches every variant, while an `allow` rule (and a grant,
whose SQL lookup compares the name exactly) lets through only the name as written. A variant
never gets more than the name it imitates; at most it is asked about.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from gate.text.glyphs import strip_invisible

Match = Literal["exact", "variant"]

#: bidi marks the confusables data wraps right-to-left letters in (not part of the letter)
_MARKS = dict.fromkeys(map(ord, "\u200e\u200f"))
_SPACE = re.compile(r"\s+")
#: the longest name worth folding: past this, the name is cut before folding (a tool name
#: is a short identifier; this bounds the work a hostile name can cause)
_LONGEST = 512


#: letter -> the ASCII it reads as, one "hex code point, ASCII" pair a line: made by `build`
#: from Unicode's confusables data (`python -m gate.policy.toolnames` writes it again)
TABLE = Path(__file__).with_name("lookalikes.txt")
#: what a letter may read as in the table: never a glob's `*`, `?` or `[`
_READS_AS = re.compile(r"[A-Za-z0-9_.:/-]+")


@functools.cache
def _skeleton() -> dict[int, str]:
    """The table in `TABLE`, read once (~1,800 entries)."""
    table: dict[int, str] = {}
    for line in TABLE.read_text("ascii").splitlines():
        if line and not line.startswith("#"):
            code, reads_as = line.split()
            table[int(code, 16)] = reads_as
    return table


def build(data: Mapping[str, Iterable[Mapping[str, str]]]) -> dict[int, str]:
    """Letter -> the ASCII it reads as, from `confusable_homoglyphs`' data (UTS #39).

    The data lists each letter with its look-alikes in both directions; only letters beyond
    ASCII that read as ASCII are kept. Capital letters that read as "l" (Cyrillic "І", Greek
    "Ι") are read as "I": after case folding they meet "i", which is how a person reads them.
    """
    table: dict[int, str] = {}
    for key, homoglyphs in data.items():
        key = key.translate(_MARKS)
        for entry in homoglyphs:
            other = entry["c"].translate(_MARKS)
            for letter, reads_as in ((key, other), (other, key)):
                if len(letter) != 1 or letter.isascii() or ord(letter) in table:
                    continue
                if not _READS_AS.fullmatch(reads_as):
                    continue
                if reads_as == "l" and letter != letter.casefold():
                    reads_as = "I"
                table[ord(letter)] = reads_as
    return table


def load() -> None:
    """Read the confusables table now (at start-up), not on the first call whose tool name
    goes beyond ASCII."""
    _skeleton()


def canonical(name: str) -> str:
    """The form policy compares tool names (and rules' globs) in: see the module docstring."""
    if name.isascii() and name.isprintable() and " " not in name:
        return name.lower()  # the common case: nothing to fold but case
    text = unicodedata.normalize("NFKC", name[:_LONGEST])
    text = _SPACE.sub("", strip_invisible(text))
    table = _skeleton()
    text = text.translate(table).casefold()
    # case folding can make a letter the table knows only in lower case (or undo NFKC)
    return unicodedata.normalize("NFKC", text).translate(table).lower()


def match(
    patterns: tuple[str, ...], folded: tuple[str, ...], name: str, canonical_name: str
) -> Match | None:
    """How `name` matches one of a rule's globs: "exact" (as written), "variant" (only in
    canonical form) or None. `folded` holds `canonical` of each of `patterns`, computed once
    when the rule is compiled; `canonical_name` is `canonical(name)`, computed once per call."""
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
        return "exact"
    if any(fnmatch.fnmatchcase(canonical_name, pattern) for pattern in folded):
        return "variant"
    return None


def _write_table() -> None:
    """Write `TABLE` again from the installed `confusable_homoglyphs` data."""
    import importlib.util

    spec = importlib.util.find_spec("confusable_homoglyphs")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("install confusable-homoglyphs (a development dependency) first")
    folder = Path(next(iter(spec.submodule_search_locations)))
    data = json.loads((folder / "confusables.json").read_text("utf-8"))
    lines = [
        "# letter (hex code point) and the ASCII it reads as: gate/policy/toolnames.py, `build`"
    ]
    lines += [f"{code:x} {reads_as}" for code, reads_as in sorted(build(data).items())]
    TABLE.write_text("\n".join(lines) + "\n", "ascii")


if __name__ == "__main__":
    _write_table()
