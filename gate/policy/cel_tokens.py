"""CEL's tokens, for `gate.policy.cel_ast`'s parser and `gate.policy.cel_vocab`'s hints.

Comments and every literal form (ints, `u` uints, doubles, hex, single, double and triple
quoted strings with `r` and `b` prefixes and their escapes) are read the way cel-spec's
grammar reads them. Linear in the text; raises only `ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal


class ParseError(ValueError):
    """The text is not an expression this parser understands."""


@dataclass(frozen=True)
class Token:
    kind: Literal["ident", "num", "str", "op", "end"]
    text: str
    at: int
    value: object = None


_SPACE = re.compile(r"(?:[ \t\n\r\f]+|//[^\n]*)+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(
    r"(?:\d+\.\d+(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)"  # double
    r"|0[xX][0-9a-fA-F]+[uU]?|\d+[uU]?"  # int, uint
)
_STRING_START = re.compile(r"(?:[rR][bB]?|[bB][rR]?)?(?:\"\"\"|'''|\"|')")
#: operators, longest first where one is a prefix of another
_OPS = ("&&", "||", "==", "!=", "<=", ">=", "<", ">", "!", "?", ":", ".", ",", *"()[]{}+-*/%")
_ESCAPE = re.compile(
    r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2}|[abfnrtv\\?\"'`])"
)
_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def tokenize(text: str) -> list[Token]:
    """CEL tokens of `text`, ending with an "end" token."""
    tokens: list[Token] = []
    i, n = 0, len(text)
    while True:
        space = _SPACE.match(text, i)
        if space:
            i = space.end()
        if i >= n:
            tokens.append(Token("end", "", i))
            return tokens
        string = _STRING_START.match(text, i)
        if string:
            token, i = _string(text, i, string.group())
            tokens.append(token)
            continue
        number = _NUMBER.match(text, i)
        if number and not (text[i] == "." and tokens and _ends_operand(tokens[-1])):
            tokens.append(Token("num", number.group(), i))
            i = number.end()
            continue
        ident = _IDENT.match(text, i)
        if ident:
            tokens.append(Token("ident", ident.group(), i))
            i = ident.end()
            continue
        op = next((op for op in _OPS if text.startswith(op, i)), None)
        if op is None:
            raise ParseError(f"unexpected character {text[i]!r} at {i}")
        tokens.append(Token("op", op, i))
        i += len(op)


def _ends_operand(token: Token) -> bool:
    """Whether `token` can end an operand (so a following `.5` is a member access)."""
    return token.kind in ("ident", "num", "str") or token.text in (")", "]", "}")


def _string(text: str, start: int, opener: str) -> tuple[Token, int]:
    """The string literal starting at `start` (prefix and quotes in `opener`)."""
    prefix = opener.rstrip("\"'").lower()
    quote = opener[len(prefix) :]
    i = start + len(opener)
    raw, is_bytes = "r" in prefix, "b" in prefix
    while True:
        if i >= len(text) or (len(quote) == 1 and text[i] == "\n"):
            raise ParseError(f"unterminated string at {start}")
        if text.startswith(quote, i):
            break
        i += 2 if text[i] == "\\" else 1
    body = text[start + len(opener) : i]
    value = body if raw else _unescape(body)
    kind = "bytes" if is_bytes else "string"
    return Token("str", kind, start, value), i + len(quote)


def _unescape(body: str) -> str | None:
    """The value of a non-raw string body (None when an escape is not one CEL knows)."""

    def one(m: re.Match[str]) -> str:
        esc = m.group()[1:]
        if esc[0] in "xuU":
            return chr(int(esc[1:], 16))
        if esc[0].isdigit():
            return chr(int(esc, 8))
        return _SIMPLE.get(esc, esc)

    try:
        decoded = _ESCAPE.sub(one, body)
    except ValueError:  # a code point out of range
        return None
    return None if "\\" in _ESCAPE.sub("", body) else decoded
