"""Tool names as policy compares them: one canonical form, so a look-alike cannot escape a rule.

A rule for `Bash` must also catch `bash`, fullwidth `Ｂａｓｈ`, `Bаsh` with a Cyrillic "а" and
`Bash` with a zero-width space in it: an agent runtime or an MCP upstream that looks names up
loosely runs the same tool for each. `canonical` folds a name (or a rule's glob) to one form:

1. NFKC (fullwidth and mathematical letters, ligatures become plain ones);
2. invisible characters (`gate.glyphs.is_invisible`) and white space removed;
3. each letter that Unicode's confusables data (UTS #39, via `confusable_homoglyphs`) says
   reads as ASCII replaced by that ASCII (Cyrillic "а" -> "a", Greek "Ο" -> "O");
4. case folded.

`match` is the one place a rule's globs meet a tool name (`gate.policy` calls it for every
rule). Matching the canonical form widens what a rule catches, which is only safe in one
direction: an `ask` or `deny` rule catches every variant, while an `allow` rule (and a grant,
whose SQL lookup compares the name exactly) lets through only the name as written. A variant
never gets more than the name it imitates; at most it is asked about.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.util
import json
import re
import unicodedata
from pathlib import Path
from typing import Literal

from gate.glyphs import strip_invisible

Match = Literal["exact", "variant"]

#: bidi marks the confusables data wraps right-to-left letters in (not part of the letter)
_MARKS = dict.fromkeys(map(ord, "\u200e\u200f"))
_SPACE = re.compile(r"\s+")
#: the longest name worth folding: past this, the name is cut before folding (a tool name
#: is a short identifier; this bounds the work a hostile name can cause)
_LONGEST = 512


@functools.cache
def _skeleton() -> dict[int, str]:
    """Letter -> the ASCII it reads as, from the confusables data (built once, ~1,800 entries).

    The data lists each letter with its look-alikes in both directions; only letters beyond
    ASCII that read as ASCII are kept. Capital letters that read as "l" (Cyrillic "І", Greek
    "Ι") are read as "I": after case folding they meet "i", which is how a person reads them.
    """
    # found without importing the package (its __init__ works out its version at import)
    spec = importlib.util.find_spec("confusable_homoglyphs")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the confusable-homoglyphs package is not installed")
    folder = Path(next(iter(spec.submodule_search_locations)))
    data: dict[str, list[dict[str, str]]] = json.loads(
        (folder / "confusables.json").read_text("utf-8")
    )
    table: dict[int, str] = {}
    for key, homoglyphs in data.items():
        key = key.translate(_MARKS)
        for entry in homoglyphs:
            other = entry["c"].translate(_MARKS)
            for letter, reads_as in ((key, other), (other, key)):
                if len(letter) != 1 or letter.isascii() or not reads_as.isascii():
                    continue
                if not reads_as.strip() or ord(letter) in table:
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
