"""A syntax tree for CEL `when` expressions, so gate can check them before they run.

The `cel` binding compiles and runs expressions but gives no tree: only the names of the
variables and functions an expression mentions (`Program.variables()`, `.functions()`), with
names bound by macros (`x` in `args.items.exists(x, x > 1)`) mixed in. Checking a condition
(`gate.policy.check`) needs more: which argument it reads (`args.amount`, `args["amount"]`),
what a comparison compares, and which names a macro binds. This module tokenizes and parses
CEL's grammar (cel-spec's `Expr` down to `Primary`; tokens from `gate.policy.cel_tokens`) into
small frozen nodes.

It runs only on text that `cel.compile` accepted, taken from gate.toml, once at load: it
never sees tool arguments. It still treats its input as hostile (a test feeds it generated
expressions): it is linear in the text, refuses brackets nested deeper than `MAX_DEPTH` (CEL's
own parser stops before) and trees deeper than `MAX_TREE_DEPTH`, and raises only `ParseError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from gate.policy.cel_tokens import ParseError as ParseError
from gate.policy.cel_tokens import Token
from gate.policy.cel_tokens import tokenize as tokenize

#: how deep brackets may nest; the `cel` parser refuses 96 nested parentheses already
MAX_DEPTH = 100
#: how deep the tree may be (a chain of 300 `||` is 300 deep): checks walk it recursively
MAX_TREE_DEPTH = 300


# -- nodes -----------------------------------------------------------------------------------

LitKind = Literal["int", "uint", "double", "string", "bytes", "bool", "null"]


@dataclass(frozen=True)
class Lit:
    """A literal; `value` is the decoded string for strings (None if it could not be)."""

    kind: LitKind
    value: object
    at: int


@dataclass(frozen=True)
class Ident:
    name: str
    at: int


@dataclass(frozen=True)
class Select:
    """`operand.field`."""

    operand: Node
    field: str
    at: int


@dataclass(frozen=True)
class Index:
    """`operand[index]`."""

    operand: Node
    index: Node
    at: int


@dataclass(frozen=True)
class Call:
    """`name(args)` (target None) or `target.name(args)`."""

    target: Node | None
    name: str
    args: tuple[Node, ...]
    at: int


@dataclass(frozen=True)
class ListExpr:
    items: tuple[Node, ...]
    at: int


@dataclass(frozen=True)
class MapExpr:
    entries: tuple[tuple[Node, Node], ...]
    at: int


@dataclass(frozen=True)
class Message:
    """`Type{field: value}` (parsed so it can be checked; gate provides no message types)."""

    name: Node
    fields: tuple[tuple[str, Node], ...]
    at: int


@dataclass(frozen=True)
class Unary:
    op: Literal["!", "-"]
    operand: Node
    at: int


@dataclass(frozen=True)
class Binary:
    op: str  # || && == != < <= > >= in + - * / %
    left: Node
    right: Node
    at: int


@dataclass(frozen=True)
class Cond:
    """`test ? then : otherwise`."""

    test: Node
    then: Node
    otherwise: Node
    at: int


Node = Union[Lit, Ident, Select, Index, Call, ListExpr, MapExpr, Message, Unary, Binary, Cond]  # noqa: UP007

#: macros that bind their first argument as a variable over the target's elements
BINDING_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


# -- parser ----------------------------------------------------------------------------------

#: binary operators and how tightly each binds (CEL: `||` loosest, then `&&`, relations,
#: `+ -`, `* / %`)
_PRECEDENCE = {"||": 0, "&&": 1, "+": 3, "-": 3, "*": 4, "/": 4, "%": 4} | dict.fromkeys(
    ("==", "!=", "<", "<=", ">", ">=", "in"), 2
)


def parse(text: str) -> Node:
    """The syntax tree of the CEL expression `text` (raises `ParseError`)."""
    parser = _Parser(tokenize(text))
    node = parser.expr()
    if parser.peek().kind != "end":
        raise ParseError(f"unexpected {parser.peek().text!r} at {parser.peek().at}")
    if depth(node) > MAX_TREE_DEPTH:
        raise ParseError(f"the expression is more than {MAX_TREE_DEPTH} operations deep")
    return node


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens, self.pos, self.depth = tokens, 0, 0

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def take(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind != "end":
            self.pos += 1
        return token

    def accept(self, op: str) -> Token | None:
        token = self.peek()
        if token.kind == "op" and token.text == op:
            return self.take()
        return None

    def expect(self, op: str) -> Token:
        token = self.accept(op)
        if token is None:
            found = self.peek()
            raise ParseError(f"expected {op!r} at {found.at}, found {found.text or 'the end'!r}")
        return token

    def expr(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError(f"the expression nests deeper than {MAX_DEPTH} levels")
        try:
            test = self.binary(0)
            q = self.accept("?")
            if q is None:
                return test
            then = self.binary(0)
            self.expect(":")
            return Cond(test, then, self.expr(), q.at)
        finally:
            self.depth -= 1

    def binary(self, lowest: int) -> Node:
        """Precedence climbing over `_PRECEDENCE` (left-associative): one Python frame per
        nesting level, not one per operator level."""
        node = self.unary()
        while True:
            token = self.peek()
            op = token.text if token.kind in ("op", "ident") else ""
            level = _PRECEDENCE.get(op)
            if level is None or level < lowest or (token.kind == "ident" and op != "in"):
                return node
            self.take()
            node = Binary(op, node, self.binary(level + 1), token.at)

    def unary(self) -> Node:
        prefix: list[Token] = []
        while (token := self.peek()).kind == "op" and token.text in ("!", "-"):
            prefix.append(self.take())
        node = self.member(self.primary())
        for token in reversed(prefix):
            if token.text == "-" and isinstance(node, Lit) and node.kind in ("int", "double"):
                node = Lit(node.kind, _negate(node.value), token.at)
            else:
                node = Unary(token.text, node, token.at)  # type: ignore[arg-type]
        return node

    def member(self, node: Node) -> Node:
        while True:
            token = self.peek()
            if self.accept("."):
                name = self.take()
                if name.kind != "ident":
                    raise ParseError(f"expected a field name at {name.at}")
                if self.accept("("):
                    node = Call(node, name.text, self.arguments(")"), name.at)
                else:
                    node = Select(node, name.text, name.at)
            elif self.accept("["):
                index = self.expr()
                self.expect("]")
                node = Index(node, index, token.at)
            elif token.kind == "op" and token.text == "{" and isinstance(node, Ident | Select):
                self.take()
                node = Message(node, self.fields(), token.at)
            else:
                return node

    def primary(self) -> Node:
        token = self.take()
        if token.kind == "num":
            return _number(token)
        if token.kind == "str":
            return Lit("bytes" if token.text == "bytes" else "string", token.value, token.at)
        if token.kind == "ident":
            if token.text in ("true", "false"):
                return Lit("bool", token.text == "true", token.at)
            if token.text == "null":
                return Lit("null", None, token.at)
            if self.accept("("):
                return Call(None, token.text, self.arguments(")"), token.at)
            return Ident(token.text, token.at)
        if token.kind == "op":
            if token.text == "." and self.peek().kind == "ident":
                name = self.take()  # `.name`: a name from the root scope
                if self.accept("("):
                    return Call(None, "." + name.text, self.arguments(")"), token.at)
                return Ident("." + name.text, token.at)
            if token.text == "(":
                inner = self.expr()
                self.expect(")")
                return inner
            if token.text == "[":
                return ListExpr(self.arguments("]"), token.at)
            if token.text == "{":
                return MapExpr(self.entries(), token.at)
        raise ParseError(f"unexpected {token.text or 'end of expression'!r} at {token.at}")

    def arguments(self, close: str) -> tuple[Node, ...]:
        """Comma-separated expressions up to `close` (a trailing comma allowed)."""
        items: list[Node] = []
        while not self.accept(close):
            items.append(self.expr())
            if not self.accept(","):
                self.expect(close)
                break
        return tuple(items)

    def entries(self) -> tuple[tuple[Node, Node], ...]:
        items: list[tuple[Node, Node]] = []
        while not self.accept("}"):
            key = self.expr()
            self.expect(":")
            items.append((key, self.expr()))
            if not self.accept(","):
                self.expect("}")
                break
        return tuple(items)

    def fields(self) -> tuple[tuple[str, Node], ...]:
        items: list[tuple[str, Node]] = []
        while not self.accept("}"):
            name = self.take()
            if name.kind != "ident":
                raise ParseError(f"expected a field name at {name.at}")
            self.expect(":")
            items.append((name.text, self.expr()))
            if not self.accept(","):
                self.expect("}")
                break
        return tuple(items)


def _number(token: Token) -> Lit:
    text = token.text
    if len(text) > 40:  # CEL's numbers are 64-bit: no literal needs more digits
        raise ParseError(f"number too long at {token.at}")
    unsigned = text[-1] in "uU"
    digits = text[:-1] if unsigned else text
    if any(c in digits for c in ".eE") and not digits.lower().startswith("0x"):
        return Lit("double", float(digits), token.at)
    value = int(digits[2:], 16) if digits.lower().startswith("0x") else int(digits, 10)
    return Lit("uint" if unsigned else "int", value, token.at)


def _negate(value: object) -> object:
    return -value if isinstance(value, int | float) else value


# -- walking ---------------------------------------------------------------------------------


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of `node`, in source order."""
    if isinstance(node, Select):
        return (node.operand,)
    if isinstance(node, Index):
        return (node.operand, node.index)
    if isinstance(node, Call):
        return ((node.target,) if node.target is not None else ()) + node.args
    if isinstance(node, ListExpr):
        return node.items
    if isinstance(node, MapExpr):
        return tuple(part for entry in node.entries for part in entry)
    if isinstance(node, Message):
        return (node.name, *(value for _, value in node.fields))
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Cond):
        return (node.test, node.then, node.otherwise)
    return ()


def depth(node: Node) -> int:
    """How many levels deep the tree under `node` goes (iterative: any depth is safe)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, level = stack.pop()
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children(current))
    return deepest


def bound_name(node: Node) -> str | None:
    """The variable a macro call binds (`x` in `list.exists(x, ...)`), else None."""
    if (
        isinstance(node, Call)
        and node.target is not None
        and node.name in BINDING_MACROS
        and len(node.args) in (2, 3)
        and isinstance(node.args[0], Ident)
    ):
        return node.args[0].name
    return None
