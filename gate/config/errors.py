"""How a configuration mistake is told (a part of `gate.config.settings`, kept apart for its size).

pydantic says `rules.0.tool: Extra inputs are not permitted`; a person wants the line, the
rule by its name and the key they meant:
`gate.toml:12: rule "big-payments": unknown key "tool"; did you mean "tools"?`.
`explain` turns a `ValidationError` into that `ConfigError`. TOML parsers keep no positions,
so `key_lines` reads them from the text itself (tables, arrays of tables, `key =` lines);
when a key is not found there (set by a GATE_* variable, written as an inline table) the
message names the variable or goes without a line.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from gate.base.errors import ConfigError

if TYPE_CHECKING:
    pass

#: a table header, `[server]` or `[[rules]]` (quoted parts are rare in gate.toml: kept whole)
_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
#: a `key =` line (not `==`, which only a multi-line string would hold)
_KEY = re.compile(r"""^\s*([A-Za-z0-9_\-."' ]+?)\s*=(?!=)""")
#: `[[rules]]` entries are named in messages by their `name` key, as are these
_NAMED = {
    "rules": "rule",
    "approvers": "approver",
    "tokens": "token",
    "routes": "route",
    "oncall": "on-call schedule",
}
#: unknown keys are listed in full (no close match) only for tables this small
_LISTED = 20

Loc = tuple[str | int, ...]


def key_lines(text: str) -> dict[Loc, int]:
    """Each table's and key's first line (1-based), by its path as pydantic writes a `loc`.

    `[[rules]]` entries count from 0 (`("rules", 2, "tools")`); multi-line strings are
    skipped, so a `when` holding `a = b` is not taken for a key.
    """
    lines: dict[Loc, int] = {}
    counts: dict[Loc, int] = {}
    table: Loc = ()
    in_string: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if in_string is not None:
            if line.count(in_string) % 2 == 1:
                in_string = None
            continue
        header = _HEADER.match(line)
        if header is not None:
            names = _within(tuple(_unquote(p) for p in header.group(2).split(".")), counts)
            if header.group(1) == "[[":
                lines.setdefault(names, number)  # the array's first entry: the array itself
                index = counts.get(names, 0)
                counts[names] = index + 1
                table = (*names, index)
            else:
                table = names
            lines.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key is not None:
            path = (*table, *(_unquote(p) for p in key.group(1).split(".")))
            lines.setdefault(path, number)
        for quotes in ('"""', "'''"):
            if line.count(quotes) % 2 == 1:
                in_string = quotes
                break
    return lines


def _within(names: tuple[str, ...], counts: dict[Loc, int]) -> Loc:
    """A header's path with the index of each array of tables it is nested in:
    `[[rules.stages]]` under the third `[[rules]]` is `("rules", 2, "stages")`."""
    path: list[str | int] = []
    for name in names[:-1]:
        path.append(name)
        if tuple(path) in counts:
            path.append(counts[tuple(path)] - 1)
    return (*path, names[-1]) if names else ()


def _unquote(part: str) -> str:
    return part.strip().strip("\"'")


def explain(
    error: ValidationError, *, model: type[BaseModel], data: dict[str, Any], text: str, source: str
) -> ConfigError:
    """The first problem in `error` as a located, named `ConfigError`; the rest in its reason."""
    lines = key_lines(text)
    problems = error.errors()
    first = problems[0]
    loc: Loc = tuple(first["loc"])
    where, reason = _said(first, loc, model, data)
    others = [": ".join(filter(None, _said(p, tuple(p["loc"]), model, data))) for p in problems[1:]]
    if others:
        reason += "; also " + "; ".join(others)
    variable = _variable_of(loc)
    if variable is not None:  # the environment wins over the file: its line is not the cause
        return ConfigError(f"{reason} (set by {variable})", source=source, key=where or None)
    return ConfigError(reason, source=source, key=where or None, line=_line_of(lines, loc))


def _said(problem: Any, loc: Loc, model: type[BaseModel], data: dict[str, Any]) -> tuple[str, str]:
    """(where, what): `rule "r"`, `unknown key "tool"; did you mean "tools"?`."""
    message = str(problem["msg"]).removeprefix("Value error, ")
    kind = problem["type"]
    if kind == "extra_forbidden" and loc:
        *parent, name = loc
        return _where(tuple(parent), data)[0], _unknown(str(name), tuple(parent), model, data)
    if kind == "missing" and loc:
        *parent, name = loc
        return _where(tuple(parent), data)[0], f'missing key "{name}"'
    where, rest = _where(loc, data)
    return where, f"{rest}: {message}" if rest else message


def _where(loc: Loc, data: dict[str, Any]) -> tuple[str, str]:
    """(the entry, the key inside it): (`rule "r"`, `timeout`), or (`server.port`, "")."""
    if len(loc) >= 2 and loc[0] in _NAMED and isinstance(loc[1], int):
        entries = data.get(str(loc[0]))
        entry = entries[loc[1]] if isinstance(entries, list) and loc[1] < len(entries) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        noun = _NAMED[str(loc[0])]
        said = f'{noun} "{name}"' if isinstance(name, str) else f"[[{loc[0]}]] #{loc[1] + 1}"
        return said, ".".join(str(p) for p in loc[2:])
    return ".".join(str(p) for p in loc), ""


def _unknown(name: str, parent: Loc, model: type[BaseModel], data: dict[str, Any]) -> str:
    """`unknown key "tool"; did you mean "tools"?` (or the keys there are, when few)."""
    value = _value_at(data, (*parent, name))
    noun = "table" if isinstance(value, dict) else "key"
    known = sorted(_fields_at(model, parent))
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f'unknown {noun} "{name}"; did you mean "{close[0]}"?'
    if known and len(known) <= _LISTED:
        return f'unknown {noun} "{name}"; the keys here are: {", ".join(known)}'
    return f'unknown {noun} "{name}"'


def _fields_at(model: type[BaseModel], loc: Loc) -> list[str]:
    """The keys the table at `loc` takes (the fields of its settings model)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(part)
        current = _model_in(field.annotation) if field is not None else None
    if current is None:
        return []
    return [name for name, field in current.model_fields.items() if not field.exclude]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings model inside `list[X]`, `X | None` or `X` (None for a plain value)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _value_at(data: Any, loc: Sequence[str | int]) -> Any:
    for part in loc:
        if isinstance(data, dict) and isinstance(part, str):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def _line_of(lines: dict[Loc, int], loc: Loc) -> int | None:
    """The line of `loc`, or of the nearest table holding it."""
    for end in range(len(loc), 0, -1):
        line = lines.get(loc[:end])
        if line is not None:
            return line
    return None


def _variable_of(loc: Loc) -> str | None:
    """The GATE_* variable that set the value at `loc`, when one is set."""
    parts = [str(p) for p in loc if isinstance(p, str)]
    for end in range(len(parts), 0, -1):
        name = "GATE_" + "__".join(parts[:end]).upper()
        if any(key.upper() == name for key in os.environ):
            return name
    return None


def located(error: ConfigError) -> ConfigError:
    """`error` with its line in the file and its rule by name, when they can be found.

    For the errors raised after the file was read (a rule's `when` that does not compile, a
    channel's table): `rules.big-payments.when` becomes `gate.toml:14: rule "big-payments"`,
    `channels.slack.bot_token` gets the line of that key (or of its table).
    """
    if error.line is not None or not error.source or not error.key:
        return error
    if _variable_of(tuple(error.key.split("."))) is not None:
        return error  # set by a GATE_* variable: no line of the file is the cause
    try:
        text = Path(error.source).read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return error
    lines = key_lines(text)
    key = error.key
    loc: Loc = tuple(error.key.split("."))
    # `[[rules]]`, `[[routes]]` and `[[oncall]]` entries are found by their names
    array = key.partition(".")[0]
    found = data.get(array) if array in ("rules", "routes", "oncall") else None
    entries: list[Any] = found if isinstance(found, list) else []
    named = [
        (index, entry["name"])
        for index, entry in enumerate(entries)
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    ]
    for index, name in sorted(named, key=lambda item: -len(item[1])):
        if key == f"{array}.{name}" or key.startswith(f"{array}.{name}."):
            field = key[len(f"{array}.{name}.") :]
            # `stages.1.approvers`: a key inside a `[[rules.stages]]` entry
            parts = [int(p) if p.isdigit() else p for p in field.split(".")] if field else []
            loc = (array, index, *parts)
            key = f'{_NAMED[array]} "{name}"'
            break
    return ConfigError(error.reason, source=error.source, key=key, line=_line_of(lines, loc))
