"""Linear-time regular expressions: what any pattern run over untrusted text is compiled with.

RE2 (`google-re2`) matches in time linear in the text whatever the pattern, so no input can
make a scan backtrack. `gate.text.untrusted.compile` is this module's `compile`: every module
that runs a regex over text agents or people control gets it from there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

import re2


class Match(Protocol):
    """The part of a match object this module relies on (RE2's mirrors `re.Match`)."""

    def group(self, group: int | str = 0) -> str | None:
        """The text of one group (None when it did not take part)."""
        ...

    def start(self, group: int | str = 0) -> int:
        """Where the group starts."""
        ...

    def end(self, group: int | str = 0) -> int:
        """Where the group ends."""
        ...


class Pattern(Protocol):
    """A compiled linear-time pattern (RE2), with the `re.Pattern` methods gate uses."""

    def search(self, text: str) -> Match | None:
        """The first match anywhere."""
        ...

    def fullmatch(self, text: str) -> Match | None:
        """A match of the whole text."""
        ...

    def finditer(self, text: str) -> Any:
        """Every non-overlapping match, left to right."""
        ...

    def sub(self, repl: Callable[[Any], str], text: str) -> str:
        """Replace every match by what `repl` returns for it."""
        ...


def compile(pattern: str) -> Pattern:
    """Compile `pattern` with RE2: matching is linear in the text, whatever the pattern.

    RE2 has no backreferences or lookaround; use a capturing group and a replacement
    function instead. Replace through callables only: RE2's string templates mishandle
    non-ASCII text.
    """
    return cast(Pattern, re2.compile(pattern))
