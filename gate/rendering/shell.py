"""Shell commands and SQL statements: every line its own numbered line, the count in the title.

A two-line command must never read as its first line: the title and the headline say how
many lines there are, and each is shown. Claude Code's `Bash` sends `command` as a string;
Codex's `shell` and `local_shell` send an argv list (`["bash", "-lc", "..."]`), whose script
is shown as the command; `exec_command` sends `cmd`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from gate.rendering.inert import Builder, Call, one_line, top_pointer
from gate.rendering.urls import flag_urls
from gate.text import untrusted

#: argument names that hold a command to run
COMMAND_KEYS = ("command", "cmd", "script")
#: argument names that may hold SQL
SQL_KEYS = ("sql", "query", "statement", "stmt")
#: shells whose `-c` script is the command (argv ["bash", "-lc", script])
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "fish", "pwsh", "powershell", "cmd"})
_SQL = untrusted.compile(
    r"(?is)^\s*(?:--[^\n]*\n\s*)*(?:select|insert|update|delete|with|create|drop|alter|truncate"
    r"|grant|revoke|merge|replace|upsert|explain|pragma|copy|call|exec|execute|vacuum|analyze"
    r"|begin|commit|rollback|set|show|describe|use)\b"
)


def _argv_script(argv: Sequence[Any]) -> tuple[str, str] | None:
    """(shell words, script) of an argv that runs a shell script (`bash -lc "..."`)."""
    words = [str(a) for a in argv]
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1].lower() in _SHELLS:
        flags = words[1:-1]
        if (
            flags
            and all(w.startswith(("-", "/")) for w in flags)
            and any("c" in w.lower() for w in flags)
        ):
            return " ".join(words[:-1]), words[-1]
    return None


def find_command(args: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(key, how it runs, command text) of the call's command, if it has one."""
    for key in COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            return key, "", value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            shell = _argv_script(value)
            if shell:
                return key, shell[0], shell[1]
            return key, "argv", shlex.join(value)
    return None


def render_command(call: Call, args: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """The command section (its key claimed) and the headline's detail, if there is one."""
    found = find_command(args)
    if found is None:
        return None
    key, how, text = found
    path = top_pointer(key)
    build = Builder(call, "command", path)
    count = build.add_text(text, path, inspect=flag_urls)
    title = f"Command · {count} line{'s' if count != 1 else ''}"
    if how == "argv":
        title += " · argv (each word quoted as a shell would)"
    elif how:
        title += f" · run by {how}"
    build.done(title)
    return key, [line.text for line in build.lines]


def looks_like_sql(text: str) -> bool:
    """Whether `text` starts like an SQL statement (after comments)."""
    head = text[:4096].encode("utf-8", "replace").decode()  # RE2 takes UTF-8: no surrogates
    return _SQL.search(head) is not None


def render_sql(call: Call, tool: str, args: Mapping[str, Any]) -> list[str]:
    """SQL sections for the arguments holding SQL; the keys claimed."""
    by_tool = any(word in tool.lower() for word in ("sql", "query"))
    claimed: list[str] = []
    for key, value in args.items():
        if not isinstance(value, str) or not looks_like_sql(value):
            continue
        if str(key).lower() not in SQL_KEYS and not by_tool:
            continue
        path = top_pointer(key)
        build = Builder(call, "sql", path)
        count = build.add_text(value, path, inspect=flag_urls)
        named = "" if str(key).lower() in SQL_KEYS else f" in {one_line(str(key), 256).text}"
        build.done(f"SQL{named} · {count} line{'s' if count != 1 else ''}")
        claimed.append(key)
    return claimed
