"""`gate init claude-code | codex`: write the agent's hook configuration, then check it works.

A hook that cannot start is worse than none: when Claude Code cannot find `gate` on its PATH,
the shell exits 127, Claude Code treats that as a non-blocking error and runs the call, and
the gate is silently off. So the hook is written with the absolute path of this interpreter
(`<python> -m gate.hook ...`, the lightest entry point), merged into the existing settings
without losing a key or another hook (an older gate entry is updated in place, a re-run
changes nothing), and then the server is asked whether it answers (`/healthz`) and takes the
token: `POST /v1/sessions/<random>/cancel` needs an agent token and, for a session that has
no requests, changes nothing.

The PreToolUse matcher is derived from the policy's rules (`gate.policy.matchers.derive`), so
every tool a rule names reaches gate and no other tool pays the hook's start-up; `--matcher`
chooses it instead, and with no gate.toml to read every tool is sent. A re-run replaces the
matcher of a group that holds only gate's hook when it no longer sends what the rules name.

Files: Claude Code `.claude/settings.json` (project) or `~/.claude/settings.json` (user);
Codex `.codex/hooks.json` (project) or `$CODEX_HOME/hooks.json` (user, `~/.codex`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate.asking.askflow import DEFAULT_TIMEOUT, DEFAULT_URL
from gate.policy import matchers as hook_matchers
from gate.policy.matchers import GATE_COMMAND, Runtime

#: how much longer the agent lets the hook run than the hook waits for a person: time to
#: withdraw the request and answer before the agent kills it (and runs the call)
HOOK_GRACE = 60
#: Codex applies `updatedInput` from PreToolUse since 0.131.0 (openai/codex#20527)
CODEX_EDITS_FROM = (0, 131, 0)
#: Codex runs hooks without a feature flag since 0.124.0
CODEX_HOOKS_DEFAULT_FROM = (0, 124, 0)
CHECK_TIMEOUT = 5.0


class SetupError(Exception):
    """The configuration cannot be written as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Entry:
    """One hook handler to install under `event`."""

    event: str
    matcher: str | None
    handler: dict[str, Any]
    #: given the matcher of an existing group holding only gate's hook: whether to replace it
    #: with `matcher` (None: never)
    replaces: Callable[[str | None], bool] | None = None


def add_commands(sub: Any) -> None:
    """Register `init claude-code` and `init codex` on the top-level parser."""
    init = sub.add_parser(
        "init", help="install gate's hook into an agent's settings (absolute path, checked)"
    ).add_subparsers(metavar="AGENT")
    for agent, help_ in (
        ("claude-code", "write the hooks into Claude Code's settings.json"),
        ("codex", "write the hooks into Codex's hooks.json"),
    ):
        p = init.add_parser(agent, help=help_)
        p.add_argument(
            "--scope",
            choices=["project", "user"],
            default="project",
            help="project: <dir>/.claude or .codex (default); user: your home's",
        )
        p.add_argument("--dir", default=".", help="the project directory (default: .)")
        p.add_argument(
            "--url",
            default=os.environ.get("GATE_URL") or DEFAULT_URL,
            help=f"the gate server (default: $GATE_URL or {DEFAULT_URL})",
        )
        p.add_argument(
            "--token-env",
            default="GATE_TOKEN",
            metavar="NAME",
            help="the environment variable the hook reads its agent token from (default: "
            "GATE_TOKEN). The token itself is never written to the file",
        )
        p.add_argument(
            "--timeout",
            type=float,
            default=DEFAULT_TIMEOUT,
            help=f"seconds the hook waits for a person (default: {DEFAULT_TIMEOUT:g}); the "
            f"agent's own hook timeout is set {HOOK_GRACE} s longer",
        )
        p.add_argument(
            "--config",
            "-c",
            help="the gate.toml whose rules decide which tools the hook is sent (default: "
            "$GATE_CONFIG or ./gate.toml; without one, every tool)",
        )
        p.add_argument(
            "--matcher",
            help="the PreToolUse matcher to write instead of the one derived from the rules "
            f"(every tool: {hook_matchers.EVERY_TOOL[agent]!r})",  # type: ignore[index]
        )
        p.add_argument(
            "--no-check", action="store_true", help="do not ask the server whether it answers"
        )
        if agent == "codex":
            p.add_argument(
                "--apply-edits",
                action="store_true",
                help="let approvers' edits reach Codex as updatedInput (default: when `codex "
                "--version` is 0.131.0 or later)",
            )
        p.set_defaults(handler=_init, agent=agent)


def _init(ns: argparse.Namespace) -> int:
    try:
        if ns.timeout <= 0:
            raise SetupError("--timeout must be more than 0 seconds")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ns.token_env):
            raise SetupError(f"--token-env {ns.token_env!r} is not an environment variable name")
        if not ns.url.startswith(("http://", "https://")):
            raise SetupError(f"--url {ns.url!r} is not an http(s) URL")
        notes: list[str] = []
        if ns.agent == "codex":
            path, entries = _codex(ns, notes)
        else:
            path, entries = _claude_code(ns, notes)
        changes = write_hooks(path, entries)
    except SetupError as exc:
        _say(f"gate init {ns.agent}: {exc}", err=True)
        return 1
    _say(f"{path}:")
    for line in changes:
        _say(f"  {line}")
    for note in notes:
        _say(note)
    if ns.no_check:
        return 0
    token = os.environ.get(ns.token_env) or None
    problems = check_server(ns.url, token, ns.token_env)
    if not problems:
        # A token-less server (local mode) accepts the check without one: say so rather than
        # claim a token was accepted that was never sent.
        accepted = (
            f"accepts the token in ${ns.token_env}"
            if token
            else f"needs no token (local mode: ${ns.token_env} is not set and not needed)"
        )
        _say(f"checked: {ns.url} answers and {accepted}")
        return 0
    for problem in problems:
        _say(f"gate init {ns.agent}: {problem}", err=True)
    _say(
        "The hook is installed and fails closed: until this is fixed it blocks every call it "
        "matches.",
        err=True,
    )
    return 1


# -- what to write ----------------------------------------------------------------------------


def hook_command(fmt: str, ns: argparse.Namespace, *extra: str) -> str:
    """The shell command of a hook: this interpreter, by absolute path, running gate.hook."""
    argv = [sys.executable, "-m", "gate.hook", "--format", fmt, *extra]
    if ns.url != DEFAULT_URL:
        argv += ["--url", ns.url]
    if ns.token_env != "GATE_TOKEN":
        argv += ["--token-env", ns.token_env]
    return shlex.join(argv)


def _claude_code(ns: argparse.Namespace, notes: list[str]) -> tuple[Path, list[Entry]]:
    base = Path.home() if ns.scope == "user" else Path(ns.dir).resolve()
    wait = ["--timeout", f"{ns.timeout:g}"]
    entries = _ask_and_report("claude-code", ns, _matcher(ns, "claude-code", notes), wait)
    end = hook_command("claude-code", ns, "--event", "session-end")
    entries.append(Entry("SessionEnd", None, {"type": "command", "command": end, "timeout": 30}))
    return base / ".claude" / "settings.json", entries


def _matcher(
    ns: argparse.Namespace, runtime: Runtime, notes: list[str]
) -> tuple[str, Callable[[str | None], bool]]:
    """The PreToolUse matcher to write, and which existing matcher of gate's it replaces."""
    if ns.matcher is not None:
        if not ns.matcher.strip():
            raise SetupError("--matcher is empty (use '*' for every tool)")
        notes.append(f"PreToolUse matcher {ns.matcher!r}, as --matcher says.")
        return ns.matcher, lambda existing: existing != ns.matcher
    from gate.base.errors import ConfigError
    from gate.config.settings import load_settings, resolve_config_path

    found = resolve_config_path(ns.config)
    if found is None:
        every = hook_matchers.EVERY_TOOL[runtime]
        notes.append(
            f"No gate.toml here (nor $GATE_CONFIG): the hook is sent every tool ({every!r}), so "
            "each call pays its start-up. Pass --config to send only the tools the rules name."
        )
        return every, lambda existing: False  # nothing to judge an existing matcher by
    try:
        rules = load_settings(found).rules
    except ConfigError as exc:
        raise SetupError(
            f"cannot read the rules to derive the hook's matcher from: {exc}; fix it, or "
            "choose the tools with --matcher"
        ) from None
    globs = [glob for rule in rules for glob in rule.tools]
    matcher = hook_matchers.derive(globs, runtime)
    notes.append(
        f"PreToolUse matcher {matcher!r}: the tools the {len(rules)} rule(s) in {found} name."
    )
    named = [(rule.name, rule.tools) for rule in rules]

    def replaces(existing: str | None) -> bool:
        hook = hook_matchers.Installed(runtime, found, (existing,))
        return bool(hook_matchers.uncovered(named, [hook]))

    return matcher, replaces


def _ask_and_report(
    fmt: str,
    ns: argparse.Namespace,
    matching: tuple[str, Callable[[str | None], bool]],
    pre: list[str],
) -> list[Entry]:
    """The PreToolUse hook that asks (given time to withdraw) and the PostToolUse one."""
    matcher, replaces = matching
    return [
        Entry(
            "PreToolUse",
            matcher,
            {
                "type": "command",
                "command": hook_command(fmt, ns, *pre),
                "timeout": int(ns.timeout) + HOOK_GRACE,
                "statusMessage": "Waiting for approval in gate...",
            },
            replaces,
        ),
        Entry(
            "PostToolUse",
            matcher,
            {
                "type": "command",
                "command": hook_command(fmt, ns, "--event", "post-tool"),
                "timeout": 30,
            },
            replaces,
        ),
    ]


def _codex(ns: argparse.Namespace, notes: list[str]) -> tuple[Path, list[Entry]]:
    if ns.scope == "user":
        home = os.environ.get("CODEX_HOME")
        base = Path(home) if home else Path.home() / ".codex"
    else:
        base = Path(ns.dir).resolve() / ".codex"
    version = codex_version()
    apply_edits = ns.apply_edits or (version is not None and version >= CODEX_EDITS_FROM)
    if version is None:
        notes.append(
            "Codex was not found on PATH (`codex --version`): approvals with edits are denied "
            "with the approved arguments; pass --apply-edits for Codex 0.131.0 or later."
        )
    else:
        shown = ".".join(map(str, version))
        if apply_edits:
            notes.append(f"Codex {shown}: approvers' edits reach Codex as updatedInput.")
        else:
            notes.append(
                f"Codex {shown} cannot apply approvers' edits: such approvals are denied with "
                "the approved arguments (upgrade to 0.131.0 or later and run this again)."
            )
        if version < CODEX_HOOKS_DEFAULT_FROM:
            notes.append(
                f"Codex {shown} runs hooks only with `[features] codex_hooks = true` in "
                "config.toml."
            )
    notes.append(
        "Codex runs a new or changed hook only once you trust it: open Codex and review it in "
        "/hooks."
    )
    pre = ["--timeout", f"{ns.timeout:g}"] + (["--apply-edits"] if apply_edits else [])
    return base / "hooks.json", _ask_and_report("codex", ns, _matcher(ns, "codex", notes), pre)


def codex_version() -> tuple[int, int, int] | None:
    """The installed Codex's version from `codex --version` (e.g. "codex-cli 0.131.0")."""
    codex = shutil.which("codex")
    if codex is None:
        return None
    try:
        out = subprocess.run(
            [codex, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    if found is None:
        return None
    major, minor, patch = (int(g) for g in found.groups())
    return major, minor, patch


# -- merging ----------------------------------------------------------------------------------


def write_hooks(path: Path, entries: list[Entry]) -> list[str]:
    """Merge `entries` into the JSON file at `path`; returns one line per entry saying what
    happened. Everything else in the file stays; the file is replaced atomically."""
    settings: Any = {}
    if path.exists():
        try:
            settings = json.loads(path.read_text(encoding="utf-8") or "{}")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise SetupError(
                f"cannot read {path}: {exc}; fix or move it, then run this again"
            ) from None
    if not isinstance(settings, dict):
        raise SetupError(f"{path} does not hold a JSON object; fix or move it first")
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SetupError(f'"hooks" in {path} is not an object; fix it first')
    lines = [_merge(hooks, entry, path) for entry in entries]
    text = json.dumps(settings, indent=2, ensure_ascii=False) + "\n"
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_text(text, encoding="utf-8")
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    return lines


def _merge(hooks: dict[str, Any], entry: Entry, path: Path) -> str:
    groups = hooks.setdefault(entry.event, [])
    if not isinstance(groups, list):
        raise SetupError(f'"hooks.{entry.event}" in {path} is not a list; fix it first')
    command = entry.handler["command"]
    seen = changed = 0
    retargeted: list[str] = []
    for group in groups:
        handlers = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(handlers, list):
            continue
        if hook_matchers.retarget(group, entry.matcher, entry.replaces):
            retargeted.append(str(group["matcher"]))
        for handler in handlers:
            if isinstance(handler, dict) and GATE_COMMAND.search(str(handler.get("command"))):
                seen += 1
                wanted = {**handler, **entry.handler}  # keeps keys the user added
                if wanted != handler:
                    handler.clear()
                    handler.update(wanted)
                    changed += 1
    if seen == 0:
        group = {"matcher": entry.matcher} if entry.matcher is not None else {}
        groups.append({**group, "hooks": [dict(entry.handler)]})
        return f"{entry.event}: added {command}"
    matcher = f"; matcher now {entry.matcher!r}" if retargeted else ""
    if changed:
        return f"{entry.event}: updated {changed} gate hook(s) to {command}{matcher}"
    if retargeted:
        return f"{entry.event}: gate hook unchanged ({command}){matcher}"
    return f"{entry.event}: unchanged ({command})"


# -- checking ---------------------------------------------------------------------------------


def check_server(url: str, token: str | None, token_env: str) -> list[str]:
    """What is wrong with `url` and `token` for a hook (empty: nothing)."""
    base = url.rstrip("/")
    status, _ = _get(base + "/healthz", None, "GET")
    if status != 200:
        what = f"HTTP {status}" if status else "no answer"
        return [
            f"{url} does not answer as a gate server ({what} from /healthz): start `gate serve`"
        ]
    probe = f"/v1/sessions/gate-init-check-{uuid.uuid4().hex}/cancel"
    status, body = _get(base + probe, token, "POST")
    if status == 200:
        return []
    err = body.get("error") if isinstance(body, dict) else None
    message = f"HTTP {status}" + (
        f" {err.get('code')}: {err.get('message')}" if isinstance(err, dict) else ""
    )
    if status == 401:
        fix = (
            f"${token_env} is not set"
            if token is None
            else f"the token in ${token_env} is not accepted"
        )
        return [f"{fix} ({message}): export {token_env}=<an agent token from gate.toml [[tokens]]>"]
    if status == 403:
        return [f'the token in ${token_env} is not an agent token ({message}): use role = "agent"']
    return [f"{url} refused the token check ({message})"]


def _get(url: str, token: str | None, method: str) -> tuple[int, Any]:
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = b"{}" if method == "POST" else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=CHECK_TIMEOUT) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, None
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def _say(text: str, *, err: bool = False) -> None:
    print(text, file=sys.stderr if err else sys.stdout)
