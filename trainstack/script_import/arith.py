"""bash's integer arithmetic (`$((...))`, `((...))`, `for ((...))`), evaluated without `eval`.

A recursive-descent reader of the C-like grammar bash documents (assignment, ternary, logical,
bitwise, comparison, shift, + - * / % **, unary, ++/--). Names are read and written through
callbacks, so the shell decides what an unknown value means; `Unknown` stops the evaluation.
"""
from __future__ import annotations

import re
from typing import Callable

_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+|[A-Za-z_][A-Za-z0-9_]*|\*\*=?|<<=?|>>=?|\+\+|--|&&|\|\||"
                    r"[=!<>]=|[-+*/%&|^]=|[-+*/%&|^~!<>=?:(),])")


class Unknown(Exception):
    """A name whose value import cannot know (the caller has recorded why)."""


class ArithError(Exception):
    """Not an arithmetic expression bash would accept."""


def tokenize(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ArithError(f"cannot read `{text[pos:].strip()}` in `{text.strip()}`")
        out.append(m.group(1))
        pos = m.end()
    return out


class Evaluator:
    def __init__(self, text: str, get: Callable[[str], int], put: Callable[[str, int], None]):
        self.toks, self.i, self.get, self.put, self.text = tokenize(text), 0, get, put, text

    def peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if expected is not None and tok != expected:
            raise ArithError(f"expected `{expected}` in `{self.text.strip()}`")
        self.i += 1
        return tok

    def run(self) -> int:
        if not self.toks:
            return 0
        value = self.comma()
        if self.i != len(self.toks):
            raise ArithError(f"unexpected `{self.peek()}` in `{self.text.strip()}`")
        return value

    def comma(self) -> int:
        value = self.assign()
        while self.peek() == ",":
            self.take()
            value = self.assign()
        return value

    def assign(self) -> int:
        tok, nxt = self.peek(), self.toks[self.i + 1] if self.i + 1 < len(self.toks) else ""
        if _is_name(tok) and nxt in ("=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^=", "**="):
            self.i += 2
            rhs = self.assign()
            value = rhs if nxt == "=" else _binary(nxt[:-1], self.get(tok), rhs)
            self.put(tok, value)
            return value
        return self.ternary()

    def ternary(self) -> int:
        cond = self.binary(0)
        if self.peek() != "?":
            return cond
        self.take()
        yes = self.comma()
        self.take(":")
        no = self.ternary()
        return yes if cond else no

    _LEVELS = (("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"),
               ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> int:
        if level == len(self._LEVELS):
            return self.power()
        value = self.binary(level + 1)
        while self.peek() in self._LEVELS[level]:
            op = self.take()
            value = _binary(op, value, self.binary(level + 1))
        return value

    def power(self) -> int:
        base = self.unary()
        if self.peek() == "**":
            self.take()
            exp = self.power()
            if exp < 0:
                raise ArithError("exponent less than 0")
            return base ** exp
        return base

    def unary(self) -> int:
        tok = self.peek()
        if tok in ("+", "-", "!", "~"):
            self.take()
            v = self.unary()
            return {"+": v, "-": -v, "!": int(not v), "~": ~v}[tok]
        if tok in ("++", "--"):
            self.take()
            name = self.take()
            if not _is_name(name):
                raise ArithError(f"`{tok}` needs a variable in `{self.text.strip()}`")
            value = self.get(name) + (1 if tok == "++" else -1)
            self.put(name, value)
            return value
        return self.postfix()

    def postfix(self) -> int:
        tok = self.take()
        if tok == "(":
            value = self.comma()
            self.take(")")
            return value
        if _is_name(tok):
            value = self.get(tok)
            if self.peek() in ("++", "--"):
                self.put(tok, value + (1 if self.take() == "++" else -1))
            return value
        if tok[:1].isdigit():
            return int(tok, 16) if tok[:2].lower() == "0x" else int(tok, 8) if len(tok) > 1 and tok[0] == "0" \
                else int(tok)
        raise ArithError(f"unexpected `{tok or 'end'}` in `{self.text.strip()}`")


def _is_name(tok: str) -> bool:
    return bool(tok) and (tok[0].isalpha() or tok[0] == "_")


def _binary(op: str, a: int, b: int) -> int:
    if op in ("/", "%") and b == 0:
        raise ArithError("division by 0")
    if op == "/":
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q  # C truncation, as bash
    if op == "%":
        return a - b * _binary("/", a, b)
    return {"+": a + b, "-": a - b, "*": a * b, "**": a ** b if b >= 0 else 0, "<<": a << b, ">>": a >> b,
            "&": a & b, "|": a | b, "^": a ^ b, "==": int(a == b), "!=": int(a != b), "<": int(a < b),
            ">": int(a > b), "<=": int(a <= b), ">=": int(a >= b), "&&": int(bool(a and b)),
            "||": int(bool(a or b))}[op]


def evaluate(text: str, get: Callable[[str], int], put: Callable[[str, int], None]) -> int:
    """The value of `text`; `get(name)` may raise Unknown, bad syntax raises ArithError."""
    return Evaluator(text, get, put).run()
