"""History-aware conditions: `history.count` and `history.sum` in a rule's `when`.

A `when` may look at what the same caller already did within a window:

* `history.count(tools, window)`: how many calls of `tools` (a glob, as in a rule's `tools`)
  the caller made within `window` ("1h", "30m", "24h");
* `history.sum(tools, arg, window)`: the sum of the top-level numeric argument `arg` over
  those calls (calls without it, or with a value that is not a number, add nothing);
* `history.session_count(tools, window)`, `history.session_sum(tools, arg, window)`: the same
  within the call's `session_id` (a call without one fails the condition: fail closed).

Every argument is a string literal and the window is mandatory and at most
`server.history_max_window`: both are checked when gate.toml is loaded (file:line), so each
term is known before any call, and a call under such a rule sends one read per scope
(`gate.decisions.history` reads them, `gate.store.counted` holds the SQL). Which calls count,
and who "the caller" is, is said once in `gate.decisions.history` and docs/history.md.

A count is an int; a sum is an int while every value summed is one, else a double (CEL adds
no int to a double: write `double(args.amount)` when amounts may be fractional).

The values are read before the condition runs and handed to it as functions that look them up
(`functions`), so the CEL program itself never waits on a database.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from gate.base.errors import ConfigError
from gate.config.settings import parse_duration
from gate.policy import cel_ast as ast
from gate.policy import cel_engine, conditions, toolnames

Kind = Literal["count", "sum"]
Scope = Literal["agent", "session"]
Number = int | float

#: CEL name -> (what it adds up, over whose calls, how many arguments it takes)
FUNCTIONS: dict[str, tuple[Kind, Scope, int]] = {
    "count": ("count", "agent", 2),
    "sum": ("sum", "agent", 3),
    "session_count": ("count", "session", 2),
    "session_sum": ("sum", "session", 3),
}
#: the variable-like prefix the functions hang off (`history.count(...)`)
NAMESPACE = "history"


@dataclass(frozen=True)
class Term:
    """One `history.*(...)` call in a `when`, its arguments read at load."""

    kind: Kind
    scope: Scope
    tools: str
    arg: str | None
    window: timedelta
    #: the window as written ("24h"): the function is looked up by its arguments as written
    window_text: str

    @property
    def text(self) -> str:
        """The term as a rule writes it (`history.sum("pay_*", "amount", "24h")`)."""
        name = self.kind if self.scope == "agent" else f"session_{self.kind}"
        args = [self.tools, *([self.arg] if self.arg is not None else []), self.window_text]
        return f"{NAMESPACE}.{name}({', '.join(_quoted(a) for a in args)})"

    def matches(self, tool_name: str) -> bool:
        """Whether a call of `tool_name` counts towards this term: the glob, its case, width
        and look-alike variants too (renaming `pay_card` to `Pay_Card` dodges nothing)."""
        folded = (toolnames.canonical(self.tools),)
        found = toolnames.match((self.tools,), folded, tool_name, toolnames.canonical(tool_name))
        return found is not None


#: reads the values of some terms for the call being judged; raises when it cannot
Reader = Callable[[tuple[Term, ...]], Mapping[Term, Number]]


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def mentions(expr: str) -> bool:
    """Whether `expr` may call a history function (a cheap test before parsing)."""
    return f"{NAMESPACE}." in expr


def terms_of(expr: str, *, cap: timedelta, source: str | None, key: str) -> tuple[Term, ...]:
    """The history terms of a `when`, each checked; raises ConfigError (file:line) for a
    missing or too long window, an argument that is not a string literal, or a wrong name."""
    if not mentions(expr):
        return ()
    try:
        tree = ast.parse(expr)
    except ast.ParseError as exc:
        raise ConfigError(
            f"`when` uses history but gate could not read its terms ({exc})", source=source, key=key
        ) from None
    found: dict[Term, None] = {}
    stack: list[ast.Node] = [tree]
    while stack:
        node = stack.pop()
        stack.extend(ast.children(node))
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.target, ast.Ident)
            and node.target.name == NAMESPACE
        ):
            continue
        found[_term(node, cap, source, key)] = None
    return tuple(found)


def _term(node: ast.Call, cap: timedelta, source: str | None, key: str) -> Term:
    def refuse(why: str) -> ConfigError:
        return ConfigError(f"`{NAMESPACE}.{node.name}(...)` {why}", source=source, key=key)

    if node.name not in FUNCTIONS:
        known = ", ".join(f"{NAMESPACE}.{name}" for name in FUNCTIONS)
        raise refuse(f"is not a history function; gate has {known}")
    kind, scope, arity = FUNCTIONS[node.name]
    shape = "(tools, window)" if kind == "count" else "(tools, argument, window)"
    texts: list[str] = []
    for arg in node.args:
        if not (isinstance(arg, ast.Lit) and arg.kind == "string" and isinstance(arg.value, str)):
            raise refuse(
                f"takes string literals {shape}, e.g. "
                + ('("deploy_*", "1h")' if kind == "count" else '("pay_*", "amount", "24h")')
                + ": its terms are read before the call, so they cannot depend on it"
            )
        texts.append(arg.value)
    if len(texts) != arity:
        why = "a window is mandatory" if len(texts) == arity - 1 else f"takes {arity} arguments"
        raise refuse(f'{why}: write it {shape}, the window like "1h" or "24h"')
    window_text = texts[-1]
    try:
        window = parse_duration(window_text)
    except ValueError as exc:
        raise refuse(f"window: {exc}") from None
    if window > cap:
        raise refuse(
            f"window {window_text!r} is longer than server.history_max_window "
            f"({_said(cap)}); shorten it or raise that setting"
        )
    if not texts[0]:
        raise refuse('needs a tool glob ("*" for every tool)')
    return Term(
        kind=kind,
        scope=scope,
        tools=texts[0],
        arg=texts[1] if kind == "sum" else None,
        window=window,
        window_text=window_text,
    )


def _said(window: timedelta) -> str:
    seconds = int(window.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def functions(values: Mapping[Term, Number]) -> dict[str, Callable[..., Any]]:
    """The CEL functions a condition calls, answering from `values` (read before it runs)."""
    by_args = {(t.kind, t.scope, t.tools, t.arg, t.window_text): v for t, v in values.items()}

    def answer(kind: Kind, scope: Scope) -> Callable[..., Any]:
        def look(*args: str) -> Number:
            arg = args[1] if kind == "sum" else None
            # every term was read before the run; a miss would be gate's own bug: fail closed
            return by_args[(kind, scope, args[0], arg, args[-1])]

        return look

    return {
        f"{NAMESPACE}.{name}": answer(kind, scope) for name, (kind, scope, _) in FUNCTIONS.items()
    }


def shown(values: Mapping[Term, Number]) -> dict[str, Number]:
    """Each term as written with its value, for `gate policy explain` and the trail."""
    return {term.text: value for term, value in values.items()}


class Reading:
    """The history one call's evaluation read: each term read at most once, for every rule
    tried on the call (none when no rule that uses history is reached)."""

    def __init__(self, reader: Reader | None) -> None:
        self._reader = reader
        self.values: dict[Term, Number] = {}

    def run(
        self, terms: tuple[Term, ...], program: Any, activation: dict[str, Any]
    ) -> tuple[object, str | None]:
        """`program` run on `activation` with `terms` read first; a read that fails is the
        condition's failure (fail closed), as any CEL error is."""
        if not terms:
            return conditions.run(program, activation)
        missing = tuple(term for term in terms if term not in self.values)
        if missing:
            if self._reader is None:
                return None, "could not read the call history (none is available here)"
            try:
                self.values.update(self._reader(missing))
            except (KeyboardInterrupt, SystemExit):
                raise
            except ValueError as exc:  # gate's own words (a session term, no session_id)
                return None, f"could not read the call history ({conditions.short(exc)})"
            except Exception as exc:  # a database error or outage: the call does not run
                # its kind only: a driver's message names hosts and ports, and this is shown
                # on the card to approvers
                return None, f"could not read the call history ({type(exc).__name__})"
        values = {term: self.values[term] for term in terms}
        context = cel_engine.context(activation, functions(values))
        return conditions.run(program, context)

    def said(self, terms: tuple[Term, ...]) -> list[str]:
        """`history.count("deploy_*", "1h") = 2` for each of `terms` read."""
        return [f"{t.text} = {self.values[t]}" for t in terms if t in self.values]
