"""Characters that make text read as something it is not: what `gate.text.untrusted` removes or
escapes before anyone is shown text an agent wrote.

Invisible characters (bidi overrides and isolates, zero-width characters, controls, private
use...) hide or reorder text; look-alike letters ("gіthub.com" with a Cyrillic "і", fullwidth
"ｇｉｔｈｕｂ") pass for the host an approver trusts. Plain text loses the first kind; JSON
shows both as `\\uXXXX` escapes, which parse back to the same value. Each decision is made
once per code point and cached (up to `_TABLE_CACHE` of them), so a scan is one
`str.translate`, linear in the text. Other modules use these through `gate.text.untrusted`.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from typing import Any

import re2

# -- invisible characters ---------------------------------------------------------------------

#: blank-rendering letters (Hangul fillers) that are not in a format category
_BLANK_LETTERS = frozenset({0x115F, 0x1160, 0x3164, 0xFFA0})
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})
#: a translate table caches one entry per code point seen; past this many, it computes
#: without caching, so hostile text cannot grow it without bound
_TABLE_CACHE = 65_536


def is_invisible(char: str) -> bool:
    """Whether a character hides or reorders text: controls other than \\n and \\t, format
    characters (bidi marks, overrides and isolates, zero-width characters), private-use and
    surrogate code points, line and paragraph separators, blank fillers."""
    if char in "\n\t":
        return False
    return unicodedata.category(char) in _INVISIBLE_CATEGORIES or ord(char) in _BLANK_LETTERS


class _Table(dict[int, Any]):
    """A `str.translate` table deciding each code point on first sight: `replace` if `hides`."""

    def __init__(self, replace: Callable[[int], str | None], hides: Any = is_invisible) -> None:
        super().__init__()
        self.replace, self.hides = replace, hides

    def __missing__(self, code: int) -> Any:
        value = self.replace(code) if self.hides(chr(code)) else code
        if len(self) < _TABLE_CACHE:
            self[code] = value
        return value


def _json_escape(code: int) -> str:
    # json.dumps writes \uXXXX (a surrogate pair above U+FFFF): valid JSON that parses back
    return json.dumps(chr(code))[1:-1]


_STRIP = _Table(lambda code: None)
_ESCAPE = _Table(_json_escape)


def strip_invisible(text: str) -> str:
    """Plain text without invisible or direction-changing characters (see `is_invisible`)."""
    return text.translate(_STRIP)


def escape_invisible(json_text: str) -> str:
    """JSON text with each invisible character written as a `\\uXXXX` escape.

    The result parses to the same value, and shows what is there instead of hiding it.
    In JSON text such characters can only sit inside strings, so escaping them is safe.
    """
    return json_text.translate(_ESCAPE)


# -- look-alike letters -----------------------------------------------------------------------

#: scripts with letters that pass for Latin ones (Cyrillic "а" and "і", Greek "ο")
_LOOKALIKE_SCRIPTS = frozenset({"CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC"})
#: a word holding an ASCII letter and a letter beyond ASCII, in either order (RE2: linear)
_WORD, _OTHER = r"[\pL\pM\pN]*", r"[^\PL\x00-\x7F]"
_MIXED_WORD: Any = re2.compile(f"{_WORD}(?:[A-Za-z]{_WORD}{_OTHER}|{_OTHER}{_WORD}[A-Za-z]){_WORD}")


def passes_for_ascii(char: str) -> bool:
    """Whether a character beyond ASCII reads as ASCII (its NFKC form is ASCII): fullwidth
    "ｇ", mathematical "𝐠", the ligature "ﬁ", a no-break space."""
    folded = unicodedata.normalize("NFKC", char)
    return not char.isascii() and folded != char and folded.isascii()


_COMPAT = _Table(_json_escape, passes_for_ascii)
_LATIN_LOOKALIKES = _Table(
    _json_escape, lambda c: unicodedata.name(c, "").partition(" ")[0] in _LOOKALIKE_SCRIPTS
)


def escape_lookalikes(json_text: str) -> str:
    """JSON text with each letter that passes for another written as a `\\uXXXX` escape, so
    "gіthub.com" (a Cyrillic "і") or "ｇｉｔｈｕｂ" cannot read as the host an approver
    trusts: characters that read as ASCII, and letters of `_LOOKALIKE_SCRIPTS` in a word
    that also holds ASCII letters. Accented Latin, CJK and words wholly in one script show
    as typed; the result parses to the same value."""
    if json_text.isascii():
        return json_text
    mixed = _MIXED_WORD.sub(lambda m: m.group().translate(_LATIN_LOOKALIKES), json_text)
    return str(mixed).translate(_COMPAT)
