"""Whether a CEL `when` expression can only be a boolean, judged from its text.

The CEL binding gate uses compiles and runs expressions but exposes no type checker, and
`args` is dynamic anyway. This looks at the outermost operator the way CEL's grammar binds
it (ternary, then `||` / `&&`, then relations, then arithmetic, then unary, then calls and
literals) and answers:

* ``"bool"``: a comparison, a logical operator, `!`, `has()`, `.contains()`, ...;
* ``"other"``: arithmetic, a literal number, string, list or map, `size()`, `int()`, ...:
  never a boolean, so the rule is refused when gate.toml is loaded;
* ``"dynamic"``: a bare field such as `args.dangerous`, whose type is known only per call
  (policy treats a non-boolean result at run time as a failure and fails closed).

It only ever reads gate.toml, never tool arguments.
"""

from __future__ import annotations

from typing import Literal

Shape = Literal["bool", "other", "dynamic"]

_BOOL_CALLS = frozenset(
    {"has", "contains", "startsWith", "endsWith", "matches", "exists", "all", "exists_one", "bool"}
)
_OTHER_CALLS = frozenset(
    {
        "size", "int", "uint", "double", "string", "bytes", "timestamp", "duration", "type",
        "map", "filter", "dyn", "getHours", "getMinutes", "getSeconds", "getFullYear",
        "getMonth", "getDate", "getDayOfMonth", "getDayOfWeek", "getDayOfYear",
        "getMilliseconds", "lowerAscii", "upperAscii", "replace", "split", "join",
        "substring", "trim", "format", "count", "sum", "session_count", "session_sum",
    }
)  # fmt: skip
_RELATIONS = ("||", "&&", "==", "!=", "<=", ">=", "<", ">")
_STRING_PREFIXES = ("r", "R", "b", "B")


def shape(expr: str) -> Shape:
    """The kind of value `expr` can produce (see the module docstring)."""
    text = expr.strip()
    if not text:
        return "other"
    outside = _outside_brackets(text)
    q = _first(text, outside, "?")
    if q is not None:  # ternary, the loosest operator: both branches decide
        colon = _branch_colon(text, outside, q)
        if colon is None:
            return "dynamic"
        branches = {shape(text[q + 1 : colon]), shape(text[colon + 1 :])}
        if "other" in branches:
            return "other"
        return "bool" if branches == {"bool"} else "dynamic"
    if any(_first(text, outside, op) is not None for op in _RELATIONS):
        return "bool"
    if _has_word(text, outside, "in"):
        return "bool"
    if _has_binary_arithmetic(text, outside):
        return "other"
    if text[0] == "!":
        return "bool"
    if text in ("true", "false"):
        return "bool"
    if text == "null" or text[0] in "-\"'[{" or text[0].isdigit():
        return "other"
    if text[0] in _STRING_PREFIXES and len(text) > 1 and text[1] in "\"'":
        return "other"
    if text[0] == "(" and _closing(text, 0) == len(text) - 1:
        return shape(text[1:-1])
    if text.endswith(")"):
        name = _called_name(text)
        if name in _BOOL_CALLS:
            return "bool"
        if name in _OTHER_CALLS:
            return "other"
    return "dynamic"


def _skip_string(text: str, i: int) -> int:
    """Index just past the string literal that starts at `i`."""
    quote = text[i] * 3 if text.startswith(text[i] * 3, i) else text[i]
    end = i + len(quote)
    while end < len(text) and not text.startswith(quote, end):
        end += 2 if text[end] == "\\" else 1
    return end + len(quote)


def _outside_brackets(text: str) -> list[bool]:
    """For each character: True when it is outside every string and bracket."""
    flags = [False] * len(text)
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            i = _skip_string(text, i)
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0:
            flags[i] = True
        i += 1
    return flags


def _first(text: str, outside: list[bool], op: str) -> int | None:
    """Index of the first `op` outside brackets and strings."""
    start = 0
    while (i := text.find(op, start)) != -1:
        if all(outside[i : i + len(op)]):
            return i
        start = i + 1
    return None


def _has_word(text: str, outside: list[bool], word: str) -> bool:
    i = _first(text, outside, f" {word} ")
    return i is not None


def _branch_colon(text: str, outside: list[bool], q: int) -> int | None:
    """The `:` that ends the true branch of the ternary whose `?` is at `q`."""
    nested = 0
    for i in range(q + 1, len(text)):
        if not outside[i]:
            continue
        if text[i] == "?":
            nested += 1
        elif text[i] == ":":
            if nested == 0:
                return i
            nested -= 1
    return None


def _has_binary_arithmetic(text: str, outside: list[bool]) -> bool:
    """An arithmetic operator between two operands, outside brackets."""
    for i, ch in enumerate(text):
        if not outside[i] or ch not in "+-*/%" or i == 0:
            continue
        before = text[:i].rstrip()
        if not before:
            continue
        prev = before[-1]
        if ch == "-" and prev in "eE" and i >= 2 and text[i - 2].isdigit():
            continue  # 1e-5
        if prev.isalnum() or prev in "_)]}\"'":
            return True
    return False


def _closing(text: str, start: int) -> int | None:
    """Index of the bracket that closes the one at `start`, skipping strings."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch in "\"'":
            i = _skip_string(text, i)
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _called_name(text: str) -> str | None:
    """`contains` in `args.cmd.contains('x')`: the function of the outermost trailing call."""
    depth = 0
    i = len(text) - 1
    while i >= 0:  # walk back to the "(" that opens the final ")"
        ch = text[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                break
        i -= 1
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] == "_"):
        j -= 1
    name = text[j:i]
    return name or None
