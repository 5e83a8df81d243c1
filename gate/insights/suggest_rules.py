"""A proposed rule as gate.toml text, loaded back through gate's own config and policy.

The snippet is the proposal: what the operator pastes is exactly what was checked against
history, because the check parses this text with `tomllib`, validates it as `Settings` and
compiles it with `gate.policy.rules.Policy`, then asks that policy about each past call.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from typing import Any

from gate.base.errors import ConfigError
from gate.store.records import DecidedCall
from gate.text import untrusted
from gate.text.untrusted import mask_text

#: a pinned string longer than this is a payload, not a stable value a rule should name
MAX_PIN_CHARS = 200
#: CEL ints are 64-bit; a bigger JSON number cannot be pinned exactly
_INT64 = 2**63
_IDENT = untrusted.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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
        shown = ", ".join(f"{inline(k)}={v}" for k, v in self.pins) or "no arguments"
        return f"{inline(self.tool)}({shown})"


@dataclass(frozen=True)
class BuiltRule:
    """A proposal's snippet, its `when`, and the policy compiled from the snippet."""

    when: str
    toml: str
    problem: str = ""
    policy: Any = None

    def decides(self, call: DecidedCall) -> bool:
        """True when the proposed rule alone would answer `call` with its own action."""
        from gate.policy.rules import CallFacts

        action = self.policy.rules[0].action
        facts = CallFacts(call.tool_name, call.tool_args, call.agent_id, call.user_id)
        return bool(self.policy.evaluate(facts).action == action)


def literal(value: Any) -> str | None:
    """The CEL literal for a pinnable argument value (str, bool, int), else None. A string
    shaped like a credential is never pinned: the snippet would print it into gate.toml."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if -_INT64 <= value < _INT64 else None
    if isinstance(value, str) and len(value) <= MAX_PIN_CHARS and mask_text(value) == value:
        return json.dumps(value, ensure_ascii=False)
    return None


def inline(text: str) -> str:
    """`text` on one line (newlines and quotes escaped as JSON does): agent-chosen names go
    into the report's comment lines, where a newline would start a line of TOML."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def may_match(call: DecidedCall, pins: tuple[tuple[str, str], ...]) -> bool:
    """False only when a `when` pinning `pins` is certainly false for `call`: a pinned key is
    missing (`has()` is false), or holds a string other than the pinned one (CEL compares
    strings exactly). Anything else (a number against a number, a type clash that fails
    closed) is left to the compiled rule."""
    for key, lit in pins:
        if key not in call.tool_args:
            return False
        value = call.tool_args[key]
        if isinstance(value, str) and lit.startswith('"') and literal(value) != lit:
            return False
    return True


class Refusals:
    """One tool's refused calls, indexed by pinned value, so a candidate rule is checked only
    against the calls `may_match` keeps (the same calls, found without a scan)."""

    def __init__(self, calls: list[DecidedCall]) -> None:
        self.calls = calls
        self._by_pair: dict[tuple[str, str], set[int]] = {}
        self._by_key: dict[str, set[int]] = {}
        self._not_text: dict[str, set[int]] = {}
        for i, call in enumerate(calls):
            for key, value in call.tool_args.items():
                self._by_key.setdefault(key, set()).add(i)
                if not isinstance(value, str):
                    self._not_text.setdefault(key, set()).add(i)
                elif (lit := literal(value)) is not None:
                    self._by_pair.setdefault((key, lit), set()).add(i)

    def near(self, pins: tuple[tuple[str, str], ...]) -> list[DecidedCall]:
        """The refused calls for which `may_match(call, pins)` is true, oldest index first."""
        if not pins:
            return self.calls
        found: set[int] | None = None
        for key, lit in pins:
            if lit.startswith('"'):
                ids = self._by_pair.get((key, lit), set()) | self._not_text.get(key, set())
            else:
                ids = self._by_key.get(key, set())
            found = ids if found is None else found & ids
        return [self.calls[i] for i in sorted(found or ())]


def surely_matches(call: DecidedCall, pins: tuple[tuple[str, str], ...], agent: str | None) -> bool:
    """True when `call` has every pinned value exactly (so the rule matches it, uncompiled)."""
    if agent is not None and call.agent_id != agent:
        return False
    if not pins:
        return not call.tool_args
    return all(key in call.tool_args and literal(call.tool_args[key]) == lit for key, lit in pins)


def condition(pins: tuple[tuple[str, str], ...], agent: str | None) -> str:
    """The `when` for `pins`: each key present and equal (a missing key is no match, for
    a deny too: a deny's failing condition would match, fail closed)."""
    if not pins:
        parts = ["size(args) == 0"]
    else:
        parts = []
        for key, lit in pins:
            if _IDENT.search(key) and key not in _RESERVED:
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
    from gate.config.settings import RuleSettings, Settings
    from gate.policy.rules import Policy

    when = condition(candidate.pins, agent)
    text = snippet(name, kind, candidate.tool, when)
    try:
        # the rule as gate.toml's loader validates it; the rest of the settings left at
        # their defaults without reading GATE_* (a GATE_RULES in the environment must not
        # replace the one rule under test)
        (entry,) = tomllib.loads(text)["rules"]
        policy = Policy(Settings.model_construct(rules=[RuleSettings.model_validate(entry)]))
    except (ConfigError, ValueError, tomllib.TOMLDecodeError) as exc:
        return BuiltRule(when, text, problem=f"the rule would not load: {exc}")
    built = BuiltRule(when, text, policy=policy)
    if not all(built.decides(c) for c in candidate.calls):
        return BuiltRule(when, text, problem="the rule would not match its own calls")
    return built
