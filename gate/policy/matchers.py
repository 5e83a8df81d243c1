"""Which tool calls reach gate's hook: the agent's matcher, derived from the policy and checked.

An agent runs a PreToolUse hook only for the tools its `matcher` names; a rule on a tool the
matcher never sends never fires, and nothing else says so. `derive` writes the matcher that
sends every tool a rule names (`gate init`); `uncovered` reads the matchers `gate init`
installed and names each rule whose tools they never send (`gate policy check`, `gate serve`).

Matcher syntax, as each runtime reads it (Claude Code's hooks reference; Codex's
`codex-rs/hooks/src/events/common.rs`):

* `"*"`, `""` or no matcher: every tool (Codex: `"*"` only in recent versions, so gate writes
  `".*"` there, a regex every version reads as "every tool");
* only letters, digits and `_` (Claude Code also `-`, space and `,`) and `|`: exact names;
* anything else: a regex, unanchored (JavaScript in Claude Code, Rust's `regex` in Codex),
  so gate anchors what it writes: `^(?:Bash|mcp__github__.*)$`.

A rule's glob becomes a regex alternative (`*` -> `.*`, `?` -> `.`); a glob with `[...]` or
letters beyond ASCII, or `*` alone, becomes "every tool": a matcher that sends too much costs
the hook's start-up on those calls, one that sends too little lets calls past the policy.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gate.text import linear

Runtime = Literal["claude-code", "codex"]
RUNTIMES: tuple[Runtime, ...] = ("claude-code", "codex")
#: the matcher that sends every tool, as each runtime spells it
EVERY_TOOL: dict[Runtime, str] = {"claude-code": "*", "codex": ".*"}
#: a handler gate owns: `gate hook ...`, `.../gate hook ...`, `python -m gate.hook ...`,
#: `python -m gate.cli hook ...`
GATE_COMMAND = re.compile(
    r"(?:^|[\s\"'/\\])gate(?:\.exe)?[\"']?\s+hook\b|-m\s+gate\.(?:hook|cli\s+hook)\b"
)
_EXACT = {"claude-code": re.compile(r"[A-Za-z0-9_\-, |]*"), "codex": re.compile(r"[A-Za-z0-9_|]*")}
#: what gate writes as exact names (the set both runtimes have always read as exact)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")
_REGEX_SPECIAL = re.compile(r"[\\.^$|?*+()\[\]{}]")
#: names tried against a matcher for a rule whose glob has wildcards (with what the glob's
#: own literal parts give): the tools of both runtimes, and shapes of MCP names
_PROBES = (
    "Bash", "Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Glob", "Grep", "LS",
    "WebFetch", "WebSearch", "Task", "Agent", "TodoWrite", "apply_patch", "shell",
    "mcp__server__tool", "x",
)  # fmt: skip


def derive(globs: Iterable[str], runtime: Runtime) -> str:
    """The matcher that sends `runtime`'s hook every tool one of `globs` (rules' `tools`)
    can match: exact names when that says it all, else an anchored regex, else every tool."""
    names: list[str] = []
    for glob in globs:
        alternative = _alternative(glob)
        if alternative is None:
            return EVERY_TOOL[runtime]
        if alternative not in names:
            names.append(alternative)
    if not names:
        return EVERY_TOOL[runtime]  # no rule names a tool: nothing narrower is safe
    if all(_PLAIN_NAME.fullmatch(name) for name in names):
        return "|".join(names)
    return "^(?:" + "|".join(names) + ")$"


def _alternative(glob: str) -> str | None:
    """`glob` as a regex alternative, or its exact name; None: only "every tool" covers it."""
    if not glob.isascii() or "[" in glob or not glob.strip("*"):
        return None
    if "*" not in glob and "?" not in glob:
        return glob if _PLAIN_NAME.fullmatch(glob) else _REGEX_SPECIAL.sub(r"\\\g<0>", glob)
    parts = re.split(r"([*?])", glob)
    return "".join(
        ".*" if p == "*" else "." if p == "?" else _REGEX_SPECIAL.sub(r"\\\g<0>", p) for p in parts
    )


def sends(matcher: str | None, runtime: Runtime, tool_name: str) -> bool | None:
    """Whether a PreToolUse group with `matcher` runs for `tool_name` (None: a regex Python
    cannot read, so gate cannot tell)."""
    if matcher is None or matcher in ("", "*"):
        return True
    if _EXACT[runtime].fullmatch(matcher):
        names = re.split(r"[|,]", matcher) if runtime == "claude-code" else re.split(r"\|", matcher)
        return tool_name in (n.strip() for n in names)
    try:  # RE2: the operator's pattern runs over a name an agent chose, in linear time
        return linear.compile(matcher).search(tool_name) is not None
    except Exception:  # a pattern RE2 cannot run (backreferences, lookarounds): unknown
        return None


def _probes(glob: str) -> list[str]:
    """Tool names `glob` matches, to try a matcher with: the glob itself when it is a name,
    else known tool names and the glob's wildcards filled in a few ways."""
    if "*" not in glob and "?" not in glob and "[" not in glob:
        return [glob]
    filled = [
        re.sub(r"\?", "x", re.sub(r"\*", fill, glob))
        for fill in ("", "x", "Read", "mcp__server__tool")
    ]
    names = dict.fromkeys([*filled, *_PROBES])
    return [name for name in names if name and fnmatch.fnmatchcase(name, glob)]


@dataclass(frozen=True)
class Installed:
    """The PreToolUse matchers of gate's hook in one agent settings file."""

    runtime: Runtime
    path: Path
    matchers: tuple[str | None, ...]


def hook_files(project: Path, home: Path | None = None) -> list[tuple[Runtime, Path]]:
    """The files `gate init` writes: each runtime's project file, then its user file."""
    home = home or Path.home()
    codex_home = os.environ.get("CODEX_HOME")
    return [
        ("claude-code", project / ".claude" / "settings.json"),
        ("claude-code", home / ".claude" / "settings.json"),
        ("codex", project / ".codex" / "hooks.json"),
        ("codex", (Path(codex_home) if codex_home else home / ".codex") / "hooks.json"),
    ]


def installed(files: Sequence[tuple[Runtime, Path]]) -> list[Installed]:
    """gate's PreToolUse matchers in each of `files` that holds a gate hook (unreadable or
    foreign files are skipped: they are the agent's to complain about)."""
    found: list[Installed] = []
    for runtime, path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        groups = data.get("hooks", {}).get("PreToolUse") if isinstance(data, dict) else None
        if not isinstance(groups, list):
            continue
        matchers = tuple(
            group.get("matcher")
            for group in groups
            if isinstance(group, dict) and _holds_gate(group)
        )
        if matchers:
            found.append(Installed(runtime, path, matchers))
    return found


def retarget(
    group: dict[str, Any], matcher: str | None, replaces: Callable[[str | None], bool] | None
) -> bool:
    """Give a group holding only gate's hook `matcher` when `replaces` says its own must go
    (it no longer sends what the rules name); a group shared with other hooks keeps its own."""
    handlers = group.get("hooks")
    if replaces is None or matcher is None or not isinstance(handlers, list) or not handlers:
        return False
    only_gate = all(
        isinstance(h, dict) and GATE_COMMAND.search(str(h.get("command"))) for h in handlers
    )
    if not only_gate or not replaces(group.get("matcher")):
        return False
    group["matcher"] = matcher
    return True


def _holds_gate(group: dict[str, object]) -> bool:
    handlers = group.get("hooks")
    return isinstance(handlers, list) and any(
        isinstance(h, dict) and GATE_COMMAND.search(str(h.get("command"))) for h in handlers
    )


def uncovered(rules: Iterable[tuple[str, Sequence[str]]], hooks: Sequence[Installed]) -> list[str]:
    """A warning for each rule naming a tool no installed gate hook of a runtime sends.

    `rules` are (name, tools globs). Per runtime, a tool is sent when any of its files'
    gate matchers sends it (the agent runs every matching group)."""
    warnings: list[str] = []
    rules = list(rules)
    for runtime in RUNTIMES:
        mine = [hook for hook in hooks if hook.runtime == runtime]
        if not mine:
            continue
        where = "; ".join(
            f"{', '.join(repr(m) for m in hook.matchers)} in {hook.path}" for hook in mine
        )
        for name, globs in rules:
            for glob in globs:
                missed = [
                    probe
                    for probe in _probes(glob)
                    # a matcher gate cannot read (None) is given the benefit of the doubt
                    if not any(
                        sends(m, runtime, probe) is not False for h in mine for m in h.matchers
                    )
                ]
                if not missed:
                    continue
                what = "any tool" if not glob.strip("*") else f"{glob!r}"
                example = "" if missed == [glob] else f" (e.g. {missed[0]!r})"
                warnings.append(
                    f"rule {name!r} names {what}{example}, but the {runtime} hook's PreToolUse "
                    f"matcher ({where}) never sends it to gate, so the rule cannot fire there: "
                    f"run `gate init {runtime}` again to derive the matcher from the rules"
                )
    return warnings
