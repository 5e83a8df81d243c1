"""Whether every name one tool glob matches is matched by another (`gate policy lint`).

Globs are `fnmatch`'s, as rules use them: `*` (any run of characters), `?` (one character),
`[abc]`, `[a-z]`, `[!abc]`, everything else literal. Each glob becomes a small automaton over
an alphabet of the characters either glob names plus one symbol for "any other character"
(every character neither glob names behaves alike in both); `covers(outer, inner)` walks the
pair of automata, determinised, looking for a name `inner` accepts and `outer` does not.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass

#: stands for every character neither glob names (a real character is one long, this is not)
_OTHER = "<other>"
#: a set written as a range wider than this (`[!-~]`, `[\x00-\uffff]`) is not reasoned about:
#: `covers` says False, so lint stays silent rather than guess
_WIDEST_RANGE = 512


@dataclass(frozen=True)
class _Item:
    """One position of a glob: "lit" (one character), "any" (`?`), "star" or "set"."""

    kind: str
    chars: frozenset[str] = frozenset()
    negated: bool = False

    def accepts(self, symbol: str) -> bool:
        if self.kind == "any":
            return True
        if self.kind == "lit":
            return symbol in self.chars
        return (symbol in self.chars) != self.negated


@functools.cache
def parse(glob: str) -> tuple[_Item, ...] | None:
    """The glob's items, as `fnmatch.translate` reads it (None: a range too wide to reason
    about)."""
    items: list[_Item] = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        i += 1
        if c == "*":
            if not items or items[-1].kind != "star":  # `**` is `*`
                items.append(_Item("star"))
        elif c == "?":
            items.append(_Item("any"))
        elif c == "[":
            j = i
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal "["
                items.append(_Item("lit", frozenset("[")))
                continue
            found = _set(glob[i:j])
            if found is None:
                return None
            items.append(found)
            i = j + 1
        else:
            items.append(_Item("lit", frozenset(c)))
    return tuple(items)


def _set(body: str) -> _Item | None:
    negated = body.startswith("!")
    if negated:
        body = body[1:]
    chars: set[str] = set()
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            low, high = ord(body[k]), ord(body[k + 2])
            if high - low > _WIDEST_RANGE:
                return None
            chars.update(chr(code) for code in range(low, high + 1))
            k += 3
        else:
            chars.add(body[k])
            k += 1
    return _Item("set", frozenset(chars), negated)


def _closure(items: tuple[_Item, ...], states: frozenset[int]) -> frozenset[int]:
    """`states` with every position a `*` lets the glob skip to (a star may match nothing)."""
    out = set(states)
    for state in sorted(states):
        while state < len(items) and items[state].kind == "star":
            state += 1
            out.add(state)
    return frozenset(out)


def _step(items: tuple[_Item, ...], states: frozenset[int], symbol: str) -> frozenset[int]:
    nxt = set()
    for state in states:
        if state == len(items):
            continue
        item = items[state]
        if item.kind == "star":
            nxt.add(state)
        elif item.accepts(symbol):
            nxt.add(state + 1)
    return _closure(items, frozenset(nxt))


def _alphabet(*globs: tuple[_Item, ...]) -> list[str]:
    chars = {c for items in globs for item in items for c in item.chars}
    return [*sorted(chars), _OTHER]


def covers(outer: str, inner: str) -> bool:
    """Whether every name `inner` matches, `outer` matches too (False when unsure)."""
    if outer == inner:
        return True
    sample = _sample(inner)
    if sample is not None and not fnmatch.fnmatchcase(sample, outer):
        return False  # one name `inner` matches is enough to say no (and the usual answer)
    big, small = parse(outer), parse(inner)
    if big is None or small is None:
        return False
    alphabet = _alphabet(big, small)
    start = (_closure(small, frozenset({0})), _closure(big, frozenset({0})))
    seen = {start}
    todo = [start]
    while todo:
        in_small, in_big = todo.pop()
        if len(small) in in_small and len(big) not in in_big:
            return False  # a name `inner` matches and `outer` does not
        for symbol in alphabet:
            pair = (_step(small, in_small, symbol), _step(big, in_big, symbol))
            if pair[0] and pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return True


@functools.cache
def _sample(glob: str) -> str | None:
    """One name the glob matches, its stars matching nothing (None: no name found)."""
    items = parse(glob)
    if items is None:
        return None
    name = []
    for item in items:
        if item.kind == "star":
            continue
        if item.kind != "set":
            name.append(next(iter(item.chars)) if item.chars else "a")
            continue
        pool = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
        found = next((c for c in [*sorted(item.chars), *pool] if item.accepts(c)), None)
        if found is None:
            return None
        name.append(found)
    return "".join(name)


def matches_everything(glob: str) -> bool:
    """Whether the glob matches every name (`*`, `**`)."""
    return bool(glob) and set(glob) == {"*"}


def shortest(glob: str) -> int:
    """The length of the shortest name the glob matches."""
    items = parse(glob)
    if items is None:
        return 0
    return sum(1 for item in items if item.kind != "star")
