"""A proposed rule as gate.toml text, loaded back through gate's own config and policy.

The snippet is the proposal: what the operator pastes is exactly what was checked against
history, because the check parses this text with `tomllib`, validates it as `Settings` and
compiles it with `gate.policy.Policy`, then asks that policy about each past call.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from typing import Any

from gate.errors import ConfigError
from gate.store.records import DecidedCall

#: a pinned string longer than this is a payload, not a stable value a rule should name
MAX_PIN_CHARS = 200
#: CEL ints are 64-bit; a bigger JSON number cannot be pinned exactly
_INT64 = 2**63
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: CEL's reserved words cannot follow a dot (`args.in`)
_RESERVED = frozenset(
    "as break const continue else false for function if import in let loop package "
    "namespace null return true var void while".split()
)


@dataclass(frozen=True)
class Candidate:
    """Agreeing calls of one tool and the (key, CEL literal) pairs they all share."""

    tool: str
    pins: tuple[tuple[str, str], ...]
    calls: tuple[DecidedCall, ...]

    def describe(self) -> str:
        """`tool(key=literal, ...)` for messages."""
        shown = ", ".join(f"{k}={v}" for k, v in self.pins) or "no arguments"
        return f"{self.tool}({shown})"


@dataclass(frozen=True)
class BuiltRule:
    """A proposal's snippet, its `when`, and the policy compiled from the snippet."""

    when: str
    toml: str
    problem: str = ""
    policy: Any = None

    def decides(self, call: DecidedCall) -> bool:
        """True when the proposed rule alone would answer `call` with its own action."""
        from gate.policy import CallFacts

        action = self.policy.rules[0].action
        facts = CallFacts(call.tool_name, call.tool_args, call.agent_id, call.user_id)
        return bool(self.policy.evaluate(facts).action == action)


def literal(value: Any) -> str | None:
    """The CEL literal for a pinnable argument value (str, bool, int), else None."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if -_INT64 <= value < _INT64 else None
    if isinstance(value, str) and len(value) <= MAX_PIN_CHARS:
        return json.dumps(value, ensure_ascii=False)
    return None


def condition(pins: tuple[tuple[str, str], ...], agent: str | None) -> str:
    """The `when` for `pins`: each key present and equal (a missing key is no match, for
    a deny too: a deny's failing condition would match, fail closed)."""
    if not pins:
        parts = ["size(args) == 0"]
    else:
        parts = []
        for key, lit in pins:
            if _IDENT.match(key) and key not in _RESERVED:
                parts.append(f"has(args.{key}) && args.{key} == {lit}")
            else:
                quoted = json.dumps(key, ensure_ascii=False)
                parts.append(f"{quoted} in args && args[{quoted}] == {lit}")
    if agent is not None:
        parts.append(f"agent_id == {json.dumps(agent, ensure_ascii=False)}")
    return " && ".join(parts)


def snippet(name: str, kind: str, tool: str, when: str) -> str:
    """The `[[rules]]` table, as gate.toml text (TOML basic strings are JSON's)."""
    reason = (
        "Suggested from history: people always approved these calls"
        if kind == "allow"
        else "Suggested from history: people always rejected these calls"
    )
    lines = [
        "[[rules]]",
        f"name = {json.dumps(name)}",
        f"tools = [{json.dumps(tool, ensure_ascii=False)}]",
        f"when = {json.dumps(when, ensure_ascii=False)}",
        f'action = "{kind}"',
        f"reason = {json.dumps(reason)}",
    ]
    return "\n".join(lines) + "\n"


def build_rule(name: str, kind: str, candidate: Candidate, agent: str | None) -> BuiltRule:
    """The snippet for `candidate`, loaded and compiled as gate would; `problem` says why a
    snippet is unusable (it does not load, or does not match its own calls)."""
    from gate.config import Settings
    from gate.policy import Policy

    when = condition(candidate.pins, agent)
    text = snippet(name, kind, candidate.tool, when)
    try:
        policy = Policy(Settings(**tomllib.loads(text)))
    except (ConfigError, ValueError, tomllib.TOMLDecodeError) as exc:
        return BuiltRule(when, text, problem=f"the rule would not load: {exc}")
    built = BuiltRule(when, text, policy=policy)
    if not all(built.decides(c) for c in candidate.calls):
        return BuiltRule(when, text, problem="the rule would not match its own calls")
    return built
