"""What a `when` condition can use at run time, and the words for what it cannot.

The variables gate provides (`gate.policy.rules.CallFacts.activation`), the functions and methods
of the CEL runtime gate runs (the `cel` binding's core library, measured against it: no
`lowerAscii`, no `max`, `contains` only as a method on text), and the fixes people need most
(`and` -> `&&`, `.includes` -> `.contains`, `command` -> `args.command`).
"""

from __future__ import annotations

import difflib
import re

#: what a `when` sees (gate.policy.rules.CallFacts.activation) and the type of each
VARIABLES = {
    "tool_name": "string",
    "args": "map",
    "agent_id": "string",
    "user_id": "string",
    "metadata": "map",
}
#: identifiers that name a type (`type(x) == string`)
TYPE_NAMES = frozenset({"int", "uint", "double", "string", "bytes", "bool", "list", "map"}) | {
    "null_type",
    "type",
}
NUMBERS = frozenset({"int", "uint", "double"})
#: functions the runtime has as `f(x)`, with the type they return ("dyn": depends)
FUNCTIONS = {
    "size": "int",
    "int": "int",
    "uint": "uint",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "timestamp": "timestamp",
    "duration": "duration",
    "dyn": "dyn",
    "type": "type",
    "has": "bool",
    "optional.of": "optional",
    "optional.none": "optional",
    "optional.ofNonZeroValue": "optional",
}
_TIME_PARTS: tuple[str, ...] = ("FullYear", "Month", "DayOfYear", "DayOfMonth", "Date")
_TIME_PARTS += ("DayOfWeek", "Hours", "Minutes", "Seconds", "Milliseconds")
#: methods the runtime has as `x.f()`: (receiver types, or None for any; what they return)
_TIME_METHODS: dict[str, tuple[frozenset[str] | None, str]] = {
    f"get{part}": (frozenset({"timestamp", "duration"}), "int") for part in _TIME_PARTS
}
METHODS: dict[str, tuple[frozenset[str] | None, str]] = _TIME_METHODS | {
    "contains": (frozenset({"string"}), "bool"),
    "startsWith": (frozenset({"string"}), "bool"),
    "endsWith": (frozenset({"string"}), "bool"),
    "matches": (frozenset({"string"}), "bool"),
    "size": (frozenset({"string", "bytes", "list", "map"}), "int"),
    "exists": (frozenset({"list", "map"}), "bool"),
    "all": (frozenset({"list", "map"}), "bool"),
    "exists_one": (frozenset({"list", "map"}), "bool"),
    "map": (frozenset({"list", "map"}), "list"),
    "filter": (frozenset({"list", "map"}), "list"),
    "value": (frozenset({"optional"}), "dyn"),
    "hasValue": (frozenset({"optional"}), "bool"),
    "or": (frozenset({"optional"}), "optional"),
    "orValue": (frozenset({"optional"}), "dyn"),
}
#: what people write from other languages, and CEL's word for it
_SPELLINGS = {
    "includes": "contains",
    "include": "contains",
    "has_substring": "contains",
    "startswith": "startsWith",
    "starts_with": "startsWith",
    "hasPrefix": "startsWith",
    "endswith": "endsWith",
    "ends_with": "endsWith",
    "hasSuffix": "endsWith",
    "len": "size",
    "length": "size",
    "count": "size",
    "match": "matches",
    "test": "matches",
    "regex": "matches",
    "search": "matches",
    "any": "exists",
    "some": "exists",
    "every": "all",
}
_LITERAL_WORDS = {"True": "true", "False": "false", "None": "null", "nil": "null"}
_LITERAL_WORDS |= {"NULL": "null", "Null": "null", "undefined": "null"}


def hint_for_syntax(expr: str) -> str | None:
    """How to fix text `cel.compile` refused, when the mistake is a common one."""
    words, ops = _outside_strings(expr)
    fixes = {"and": "&&", "or": "||", "not": "!"} | _LITERAL_WORDS
    hints = [f"`{word}` -> `{cel}`" for word, cel in fixes.items() if word in words]
    fixed_ops = {"=": "==", "===": "==", "!==": "!=", "<>": "!="}
    hints += [f"`{op}` -> `{cel}`" for op, cel in fixed_ops.items() if op in ops]
    if not hints:
        return None
    return "CEL spells it differently: " + ", ".join(hints)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATOR_RUN = re.compile(r"[=!<>]+")


def _outside_strings(expr: str) -> tuple[set[str], set[str]]:
    """The words and the runs of `=!<>` in `expr` outside string literals (a best effort on
    text that is not valid CEL: an unterminated string runs to the end)."""
    words: set[str] = set()
    ops: set[str] = set()
    i, n = 0, len(expr)
    while i < n:
        ch = expr[i]
        if ch in "\"'":
            quote = ch * 3 if expr.startswith(ch * 3, i) else ch
            i += len(quote)
            while i < n and not expr.startswith(quote, i):
                i += 2 if expr[i] == "\\" else 1
            i += len(quote)
            continue
        found = _WORD.match(expr, i) or _OPERATOR_RUN.match(expr, i)
        if found is None:
            i += 1
            continue
        (words if found.re is _WORD else ops).add(found.group())
        i = found.end()
    return words, ops


def variable_hint(name: str) -> str:
    """` (did you mean ...?)` for an unknown variable."""
    if name in _LITERAL_WORDS:
        return f": CEL writes `{_LITERAL_WORDS[name]}`"
    if name.startswith("."):
        return f": drop the leading dot (`{name[1:]}`)"
    close = difflib.get_close_matches(name, VARIABLES, n=1, cutoff=0.6)
    if close and close[0] != "args":
        return f": did you mean `{close[0]}`?"
    known = ", ".join(VARIABLES)
    return (
        f": the call's arguments are under `args` (did you mean `args.{name}`?); gate "
        f"provides {known}"
    )


def function_hint(name: str) -> str:
    if name in _SPELLINGS:
        return f": did you mean `{_SPELLINGS[name]}`?"
    names = sorted(set(METHODS) | {n for n in FUNCTIONS if "." not in n})
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.7)
    if close:
        return f": did you mean `{close[0]}`?"
    return ""
