"""Checking a rule's `when` before it ever runs: names, functions, types, and what it reads.

`cel.compile` accepts `command.contains('rm')` (no variable `command`: gate names the call's
arguments `args`) and `args.cmd.includes('rm')` (CEL has no `includes`): both fail on every
call, and a failing condition makes gate ask a person each time. `check` reads the
expression's tree (`gate.policy.cel_ast`) against what gate provides at run time and reports what
can only fail or never be true:

* a variable gate does not provide (with a did-you-mean: `command` -> `args.command`);
* a function or method the CEL runtime does not have (`.includes` -> `.contains`), or one
  called the wrong way (`contains(x, "a")` is written `x.contains("a")`);
* operands whose types are known and can never work together: `tool_name > 5`, `1 + 1.5`,
  `"a" in "abc"`, `size(args.x) == "3"` (never equal), a number where `&&` wants true or false;
* one `&&` that pins the same argument to two things at once (`args.amount == "5" &&
  args.amount > 100`).

It also answers which top-level arguments the condition reads (`args.amount`,
`args["amount"]`, `"amount" in args`): `Offers.watched_args`, marked on every surface.

What gate provides, and the hints, are `gate.policy.cel_vocab`; `hint_for_syntax` (from there) words
the fix for text `cel.compile` refused (`and` -> `&&`, `=` -> `==`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from gate.policy import cel_ast as ast
from gate.policy import cel_vocab, history
from gate.policy.cel_vocab import FUNCTIONS, METHODS, NUMBERS, TYPE_NAMES, VARIABLES
from gate.policy.cel_vocab import hint_for_syntax as hint_for_syntax

_ORDERED = frozenset({"string", "bytes", "bool", "timestamp", "duration"})
_WORDS = {"string": "text", "int": "a number", "uint": "a number", "double": "a number"}
_WORDS |= {"bool": "true or false", "null": "null", "list": "a list", "map": "a map"}
_WORDS |= {"bytes": "bytes", "timestamp": "a timestamp", "duration": "a duration"}
_WORDS |= {"type": "a type", "optional": "an optional", "number": "a number"}


@dataclass(frozen=True)
class Checked:
    """What `check` found in one expression."""

    #: what can only fail or never be true, each with its fix where one is known
    problems: tuple[str, ...]
    #: the top-level argument names it reads, in the order they appear
    watched: tuple[str, ...]
    #: set when the expression could not be analysed (nothing was checked)
    unchecked: str | None = None


def check(expr: str) -> Checked:
    """Check a `when` that `cel.compile` accepted (see the module docstring)."""
    try:
        tree = ast.parse(expr)
    except ast.ParseError as exc:
        return Checked((), (), f"gate could not analyse this condition ({exc})")
    checker = _Checker()
    checker.type_of(tree, frozenset())
    checker.conjunctions(tree)
    return Checked(tuple(dict.fromkeys(checker.problems)), tuple(dict.fromkeys(_watched(tree))))


def _watched(tree: ast.Node) -> Iterator[str]:
    """The argument names `tree` reads from the `args` variable (not a macro's own `args`)."""
    stack: list[tuple[ast.Node, frozenset[str]]] = [(tree, frozenset())]
    while stack:
        node, bound = stack.pop()
        if "args" not in bound:
            if isinstance(node, ast.Select) and _is_args(node.operand):
                yield node.field
            elif isinstance(node, ast.Index) and _is_args(node.operand):
                key = node.index
                if isinstance(key, ast.Lit) and key.kind == "string" and key.value is not None:
                    yield str(key.value)
            elif isinstance(node, ast.Binary) and node.op == "in" and _is_args(node.right):
                key = node.left
                if isinstance(key, ast.Lit) and key.kind == "string" and key.value is not None:
                    yield str(key.value)
        name = ast.bound_name(node)
        inner = bound | {name} if name else bound
        kids = ast.children(node)
        for i, child in reversed(list(enumerate(kids))):
            # a macro's own variable is bound only in the macro's arguments, not its target
            scope = inner if name and isinstance(node, ast.Call) and i > 0 else bound
            stack.append((child, scope))


def _is_args(node: ast.Node) -> bool:
    return isinstance(node, ast.Ident) and node.name == "args"


def _path(node: ast.Node) -> str | None:
    """`args.amount` / `args["amount"]` / `metadata.org` as text, else None."""
    if isinstance(node, ast.Select) and isinstance(node.operand, ast.Ident):
        return f"{node.operand.name}.{node.field}"
    if isinstance(node, ast.Index) and isinstance(node.operand, ast.Ident):
        key = node.index
        if isinstance(key, ast.Lit) and key.kind == "string" and key.value is not None:
            return f"{node.operand.name}.{key.value}"
    return None


def _class(kind: str) -> str:
    return "number" if kind in NUMBERS else kind


def _say(kind: str) -> str:
    return _WORDS.get(kind, kind)


@dataclass
class _Checker:
    problems: list[str] = field(default_factory=list)

    def type_of(self, node: ast.Node, bound: frozenset[str]) -> str:
        """The type `node` has whenever it runs ("dyn": unknown before the call)."""
        if isinstance(node, ast.Lit):
            return node.kind
        if isinstance(node, ast.Ident):
            return self._ident(node, bound)
        if isinstance(node, ast.Select):
            operand = self.type_of(node.operand, bound)
            if operand not in ("map", "dyn", "type"):
                fix = ": use `size(...)`" if node.field in ("length", "len", "count") else ""
                self.problems.append(
                    f"`.{node.field}` reads a field of {_say(operand)}, which has none{fix}"
                )
            return "dyn"
        if isinstance(node, ast.Index):
            self.type_of(node.operand, bound)
            self.type_of(node.index, bound)
            return "dyn"
        if isinstance(node, ast.Call):
            return self._call(node, bound)
        if isinstance(node, ast.ListExpr | ast.MapExpr):
            for child in ast.children(node):
                self.type_of(child, bound)
            return "list" if isinstance(node, ast.ListExpr) else "map"
        if isinstance(node, ast.Message):
            self.problems.append("gate provides no message types to build (`Name{...}`)")
            return "dyn"
        if isinstance(node, ast.Unary):
            operand = self.type_of(node.operand, bound)
            if node.op == "!":
                self._wants_bool("!", operand)
                return "bool"
            if operand not in NUMBERS | {"dyn"} or operand == "uint":
                self.problems.append(f"`-` cannot negate {_say(operand)}")
            return operand
        if isinstance(node, ast.Cond):
            self._wants_bool("? :", self.type_of(node.test, bound))
            then, otherwise = self.type_of(node.then, bound), self.type_of(node.otherwise, bound)
            return then if then == otherwise else "dyn"
        assert isinstance(node, ast.Binary)
        return self._binary(node, bound)

    def _ident(self, node: ast.Ident, bound: frozenset[str]) -> str:
        name = node.name
        if name in bound:
            return "dyn"
        if name in VARIABLES:
            return VARIABLES[name]
        if name in TYPE_NAMES:
            return "type"
        self.problems.append(f"unknown variable `{name}`{cel_vocab.variable_hint(name)}")
        return "dyn"

    def _call(self, node: ast.Call, bound: frozenset[str]) -> str:
        target = node.target
        if target is None or (isinstance(target, ast.Ident) and target.name == "optional"):
            name = node.name if target is None else f"optional.{node.name}"
            for arg in node.args:
                self.type_of(arg, bound)
            if name in FUNCTIONS:
                return FUNCTIONS[name]
            if name in METHODS:
                receiver = "x" if not node.args else "<first argument>"
                self.problems.append(
                    f"`{name}(...)` is a method in CEL: write `{receiver}.{name}(...)`"
                )
            else:
                self.problems.append(f"unknown function `{name}`{cel_vocab.function_hint(name)}")
            return "dyn"
        if (
            isinstance(target, ast.Ident)
            and target.name == history.NAMESPACE
            and target.name not in bound
            and node.name in history.FUNCTIONS
        ):
            # `history.count(...)`: its arguments are checked by `gate.policy.history.terms_of`
            return "int" if history.FUNCTIONS[node.name][0] == "count" else "dyn"
        if isinstance(target, ast.Ident) and target.name not in bound | VARIABLES.keys():
            # `math.greatest(...)`: a namespaced function from a library gate does not load
            # (`command.contains(...)` is a known method on an unknown variable)
            if target.name not in TYPE_NAMES and node.name not in METHODS:
                for arg in node.args:
                    self.type_of(arg, bound)
                self.problems.append(
                    f"unknown function `{target.name}.{node.name}`: gate's CEL has the core "
                    "functions only (size, contains, startsWith, endsWith, matches, exists, "
                    "all, map, filter, int, string, ...)"
                )
                return "dyn"
        receiver = self.type_of(target, bound)
        variable = ast.bound_name(node)
        inner = bound | {variable} if variable else bound
        for arg in node.args:
            self.type_of(arg, inner)
        if node.name not in METHODS:
            if node.name in FUNCTIONS:
                self.problems.append(
                    f"`.{node.name}()` is a function in CEL: write `{node.name}(...)` around "
                    "the value"
                )
            else:
                hint = cel_vocab.function_hint(node.name)
                self.problems.append(f"unknown method `.{node.name}`{hint}")
            return "dyn"
        receivers, returns = METHODS[node.name]
        if receivers is not None and receiver not in receivers | {"dyn"}:
            takes = " or ".join(sorted(_say(r) for r in receivers))
            self.problems.append(
                f"`.{node.name}()` works on {takes}, but here it is called on {_say(receiver)}"
            )
        return returns

    def _binary(self, node: ast.Binary, bound: frozenset[str]) -> str:
        left, right = self.type_of(node.left, bound), self.type_of(node.right, bound)
        op = node.op
        if op in ("&&", "||"):
            self._wants_bool(op, left)
            self._wants_bool(op, right)
            return "bool"
        known = "dyn" not in (left, right)
        if op in ("==", "!=") and known and not _may_equal(left, right):
            outcome = "never true" if op == "==" else "always true"
            self.problems.append(
                f"`{op}` compares {_say(left)} with {_say(right)}: they are never equal, so "
                f"this is {outcome} (CEL does not convert between types)"
            )
        elif op in ("<", "<=", ">", ">=") and known and not _orderable(left, right):
            self.problems.append(
                f"`{op}` cannot compare {_say(left)} with {_say(right)}: it fails on every call "
                "(CEL does not convert between types)"
            )
        elif op == "in":
            if right not in ("list", "map", "dyn"):
                self.problems.append(f"`in` looks in a list or a map, not in {_say(right)}")
        if op in ("==", "!=", "<", "<=", ">", ">=", "in"):
            return "bool"
        if known and not _arithmetic(op, left, right):
            mix = " (write `1.0` for a double)" if {left, right} == {"int", "double"} else ""
            self.problems.append(
                f"`{op}` cannot combine {left} and {right}: it fails on every call (CEL does "
                f"not convert between types){mix}"
            )
            return "dyn"
        if left == right:
            return left
        if {left, right} == {"timestamp", "duration"}:
            return "timestamp"
        return "dyn" if not known else ("duration" if op == "-" else left)

    def _wants_bool(self, op: str, kind: str) -> None:
        if kind not in ("bool", "dyn"):
            self.problems.append(f"`{op}` needs true or false, but one side is {_say(kind)}")

    def conjunctions(self, tree: ast.Node) -> None:
        """Report an `&&` that pins one argument to two things at once."""
        stack = [tree]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Binary) and node.op == "&&":
                self._pins(list(_conjuncts(node)))
            stack.extend(ast.children(node))

    def _pins(self, terms: list[ast.Node]) -> None:
        pins: dict[str, list[tuple[str, ast.Lit]]] = {}
        for term in terms:
            if not isinstance(term, ast.Binary) or term.op not in ("==", "<", "<=", ">", ">="):
                continue
            for side, other in ((term.left, term.right), (term.right, term.left)):
                path = _path(side)
                if path is not None and isinstance(other, ast.Lit) and other.kind != "null":
                    pins.setdefault(path, []).append((term.op, other))
        for path, found in pins.items():
            kinds = {_class(lit.kind) for _, lit in found}
            equal = {repr(lit.value) for op, lit in found if op == "=="}
            if len(kinds) > 1:
                said = " and with ".join(sorted(_say(k) for k in kinds))
                self.problems.append(
                    f"`{path}` is compared with {said} in the same `&&`: one value cannot be "
                    "both, so this never matches as meant"
                )
            elif len(equal) > 1:
                self.problems.append(
                    f"`{path}` must equal {' and '.join(sorted(equal))} in the same `&&`: "
                    "it never does"
                )


def _conjuncts(node: ast.Node) -> Iterator[ast.Node]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Binary) and current.op == "&&":
            stack.extend((current.right, current.left))
        else:
            yield current


def _may_equal(left: str, right: str) -> bool:
    if left == right:
        return True
    return left in NUMBERS and right in NUMBERS


def _orderable(left: str, right: str) -> bool:
    if left in NUMBERS and right in NUMBERS:
        return True
    return left == right and left in _ORDERED


def _arithmetic(op: str, left: str, right: str) -> bool:
    if left == right and left in NUMBERS:
        return not (op == "%" and left == "double")
    pair = (left, right)
    if op == "+":
        return (left == right and left in ("string", "bytes", "list", "duration")) or pair in (
            ("timestamp", "duration"),
            ("duration", "timestamp"),
        )
    if op == "-":
        return pair in (
            ("timestamp", "timestamp"),
            ("timestamp", "duration"),
            ("duration", "duration"),
        )
    return False
