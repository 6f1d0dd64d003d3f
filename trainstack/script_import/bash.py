"""The bash subset slime's launch scripts are written in, parsed into a small tree; nothing is run.

Why a parser of our own: `shlex` knows quotes but not `$(...)`, `${VAR:-x}`, arrays, here-documents
or `if`/`for`, and the importer must know which line each token came from. What is outside the
subset (`case`, `select`, process substitution) is a `ParseError` naming its line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Union


class ParseError(Exception):
    def __init__(self, line: int, message: str):
        self.line, self.message = line, message
        super().__init__(f"line {line}: {message}")


# --- words -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lit:
    text: str
    quoted: bool = False


@dataclass(frozen=True)
class Param:
    """`$NAME`, `${NAME}`, `${NAME[i]}`, `${#NAME}`, `${NAME:-word}` and the like."""

    name: str
    src: str
    index: str | None = None
    op: str = ""  # ":-", "-", ":=", "=", ":+", "+", ":?", "?", "#", "##", "%", "%%", "/", "//", or "?unsupported"
    arg: "Word | None" = None
    quoted: bool = False
    length: bool = False


@dataclass(frozen=True)
class CmdSub:
    """`$(...)` or a backquoted command: its text, parsed again when it is one import can evaluate."""

    body: str
    src: str
    quoted: bool = False


@dataclass(frozen=True)
class Arith:
    """`$((...))`: its text with `$` expansions as a word, evaluated as integer arithmetic."""

    expr: "Word"
    src: str
    quoted: bool = False


Part = Union[Lit, Param, CmdSub, Arith]


@dataclass(frozen=True)
class Word:
    parts: tuple[Part, ...]
    line: int
    src: str

    def literal(self) -> str | None:
        """The word's text when it has no expansion (quotes removed), else None."""
        if all(isinstance(p, Lit) for p in self.parts):
            return "".join(p.text for p in self.parts)  # type: ignore[union-attr]
        return None

    def plain(self) -> str | None:
        """The text of an unquoted, expansion-free word (what a reserved word must be)."""
        if len(self.parts) == 1 and isinstance(self.parts[0], Lit) and not self.parts[0].quoted:
            return self.parts[0].text
        return None


# --- commands --------------------------------------------------------------------------------------
@dataclass
class HereDoc:
    delimiter: str
    expand: bool  # an unquoted delimiter: the body's $ expansions apply
    strip_tabs: bool
    line: int
    body: str = ""
    body_word: Word | None = None  # the body parsed as a double-quoted string (expand only)


@dataclass
class Assign:
    name: str
    line: int
    value: Word | None = None  # NAME=word
    array: list[Word] | None = None  # NAME=(words)
    append: bool = False  # NAME+=...
    index: str | None = None  # NAME[i]=word


@dataclass
class Simple:
    assigns: list[Assign]
    words: list[Word]
    line: int
    src: str
    heredocs: list[HereDoc] = field(default_factory=list)


@dataclass
class Pipeline:
    commands: list["Node"]
    negate: bool
    line: int


@dataclass
class AndOr:
    first: "Node"
    rest: list[tuple[str, "Node"]]  # ("&&" | "||", node)
    line: int


@dataclass
class Seq:
    items: list["Node"]
    line: int


@dataclass
class If:
    clauses: list[tuple[Seq, Seq]]  # (condition, body), `if` then each `elif`
    otherwise: Seq | None
    line: int


@dataclass
class For:
    var: str
    words: list[Word] | None  # None: `for x; do` (the positional parameters)
    body: Seq
    line: int


@dataclass
class While:
    cond: Seq
    body: Seq
    until: bool
    line: int


@dataclass
class Group:
    body: Seq
    subshell: bool
    line: int


@dataclass
class ArithCmd:
    """`((expr))`: status 0 when the expression is not zero."""

    expr: Word
    line: int


@dataclass
class ArithFor:
    """`for ((init; cond; step)); do ...; done`."""

    init: Word
    cond: Word
    step: Word
    body: "Seq"
    line: int


@dataclass
class FuncDef:
    name: str
    body: "Node"
    line: int


Node = Union[Simple, Pipeline, AndOr, Seq, If, For, ArithFor, While, Group, FuncDef, ArithCmd]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=")
_OPS = ("&>>", "<<-", "<<<", "&&", "||", ";;", "<<", ">>", ">&", "<&", "&>", ">|", "<>", ";", "&", "|", "(", ")",
        "<", ">")
_REDIRECTS = {"<<-", "<<<", "<<", ">>", ">&", "<&", "&>", "&>>", ">|", "<>", "<", ">"}
_META = set(" \t\n;&|()<>")
_PARAM_OPS = (":-", ":=", ":+", ":?", "##", "%%", "//", "-", "=", "+", "?", "#", "%", "/")
RESERVED = {"if", "then", "elif", "else", "fi", "for", "in", "do", "done", "while", "until", "case", "esac",
            "{", "}", "!", "function", "select", "[[", "]]"}


@dataclass
class Tok:
    kind: str  # WORD, OP, NL, ARRAY, HEREDOC, EOF
    line: int
    word: Word | None = None
    op: str = ""
    array: Assign | None = None
    heredoc: HereDoc | None = None


class _Parts:
    """A word's parts as they are read: literal characters gathered, expansions appended."""

    def __init__(self, quoted: bool):
        self.quoted = quoted
        self.parts: list[Part] = []
        self.buf: list[str] = []

    def flush(self) -> None:
        if self.buf:
            self.parts.append(Lit("".join(self.buf), quoted=self.quoted))
            self.buf.clear()

    def add(self, *parts: Part) -> None:
        self.flush()
        self.parts.extend(parts)

    def done(self) -> tuple[Part, ...]:
        self.flush()
        return tuple(self.parts)


class Lexer:
    """Characters -> tokens. `$(...)` is found by lexing its inside with a nested lexer, so quotes,
    nested substitutions and here-documents inside it are handled as bash does."""

    def __init__(self, src: str, pos: int = 0, line: int = 1, until_paren: bool = False):
        self.src, self.pos, self.line, self.until_paren = src, pos, line, until_paren
        self.pending: list[HereDoc] = []
        self.depth = 0

    def error(self, message: str) -> ParseError:
        return ParseError(self.line, message)

    def peek(self, n: int = 0) -> str:
        i = self.pos + n
        return self.src[i] if i < len(self.src) else ""

    def tokens(self) -> list[Tok]:
        out: list[Tok] = []
        expect_delim = False
        while True:
            self._skip_blanks()
            c = self.peek()
            if not c:
                if self.until_paren:
                    raise self.error("`$(` is not closed")
                if self.pending:
                    raise ParseError(self.pending[0].line, f"here-document `{self.pending[0].delimiter}` has no "
                                     "body before the end of the file")
                out.append(Tok("EOF", self.line))
                return out
            if c == "#":
                while self.peek() and self.peek() != "\n":
                    self.pos += 1
                continue
            if c == "\n":
                out.append(Tok("NL", self.line))
                self.pos += 1
                self.line += 1
                self._read_heredocs()
                continue
            if c == "\\" and self.peek(1) == "\n":
                self.pos += 2
                self.line += 1
                continue
            if self.src.startswith("((", self.pos) and _arith_position(out):
                out.append(self._arith_command())
                continue
            op = next((o for o in _OPS if self.src.startswith(o, self.pos)), None)
            if op is not None:
                if op in ("<(", ">(") or (op in ("<", ">") and self.peek(1) == "("):
                    raise self.error("process substitution (`<(...)`) is outside what import reads")
                if self.until_paren and op == ")" and self.depth == 0:
                    return out  # the caller reads self.pos
                self.depth += {"(": 1, ")": -1}.get(op, 0)
                self.pos += len(op)
                if op in ("<<", "<<-"):
                    expect_delim = True
                    out.append(Tok("OP", self.line, op=op))
                    continue
                out.append(Tok("OP", self.line, op=op))
                continue
            m = _ASSIGN.match(self.src, self.pos)
            if m and self.src.startswith("(", m.end()) and not expect_delim:
                out.append(self._array(m))
                continue
            word = self._word()
            if expect_delim:
                expect_delim = False
                out.append(self._heredoc(word, out[-1].op == "<<-"))
                continue
            if re.fullmatch(r"\d+", word.src) and self.peek() in ("<", ">"):
                continue  # an io number (`2>&1`): the redirection that follows is skipped with its target
            out.append(Tok("WORD", word.line, word=word))

    def _arith_command(self) -> Tok:
        """`((expr))` where a command starts (and `for ((...))`): the expression's text as a token."""
        line, depth, i = self.line, 0, self.pos + 2
        while i < len(self.src):
            ch = self.src[i]
            if ch == "(":
                depth += 1
            elif ch == ")":
                if depth == 0:
                    if not self.src.startswith("))", i):
                        raise self.error("`((` is not closed by `))`")
                    break
                depth -= 1
            i += 1
        else:
            raise self.error("`((` is not closed")
        text = self.src[self.pos + 2:i]
        self.line += text.count("\n")
        self.pos = i + 2
        return Tok("ARITH", line, op=text)

    def _skip_blanks(self) -> None:
        while self.peek() in (" ", "\t", "\r"):
            self.pos += 1

    def _heredoc(self, delim: Word, strip: bool) -> Tok:
        text = delim.literal()
        if text is None:
            raise ParseError(delim.line, "a here-document delimiter with an expansion is outside what import reads")
        quoted = any(isinstance(p, Lit) and p.quoted for p in delim.parts)
        doc = HereDoc(text, expand=not quoted, strip_tabs=strip, line=delim.line)
        self.pending.append(doc)
        return Tok("HEREDOC", delim.line, heredoc=doc)

    def _read_heredocs(self) -> None:
        for doc in self.pending:
            lines = []
            start_line = self.line
            while True:
                if self.pos >= len(self.src):
                    raise ParseError(doc.line, f"here-document `{doc.delimiter}` is not closed")
                end = self.src.find("\n", self.pos)
                end = len(self.src) if end < 0 else end
                text = self.src[self.pos:end]
                self.pos = min(end + 1, len(self.src))
                self.line += 1
                check = text.lstrip("\t") if doc.strip_tabs else text
                if check == doc.delimiter:
                    break
                lines.append(check)
            doc.body = "".join(ln + "\n" for ln in lines)
            if doc.expand:
                sub = Lexer(doc.body, line=start_line)
                doc.body_word = sub._quoted_text(heredoc=True)
        self.pending = []

    def _array(self, m: re.Match) -> Tok:
        line = self.line
        name, index, plus = m.group(1), m.group(2), m.group(3)
        if index:
            raise self.error(f"`{name}{index}=(...)` is outside what import reads")
        self.pos = m.end() + 1
        words: list[Word] = []
        while True:
            self._skip_blanks()
            c = self.peek()
            if not c:
                raise ParseError(line, f"the array `{name}=(` is not closed")
            if c == "\n":
                self.pos += 1
                self.line += 1
            elif c == "\\" and self.peek(1) == "\n":
                self.pos += 2
                self.line += 1
            elif c == "#":
                while self.peek() and self.peek() != "\n":
                    self.pos += 1
            elif c == ")":
                self.pos += 1
                break
            elif c in _META:
                raise self.error(f"unexpected `{c}` inside the array `{name}=(...)`")
            else:
                words.append(self._word())
        return Tok("ARRAY", line, array=Assign(name, line, array=words, append=bool(plus)))

    # a word: literal text, quotes and expansions up to an unquoted metacharacter
    def _word(self, in_brace: bool = False) -> Word:
        """A word up to an unquoted metacharacter; `in_brace`: the word after an operator inside
        `${...}`, up to (and past) the closing brace."""
        start, line = self.pos, self.line
        out = _Parts(quoted=False)
        while True:
            c = self.peek()
            if in_brace and not c:
                raise ParseError(line, "`${` is not closed")
            if in_brace and c == "}":
                self.pos += 1
                return Word(out.done(), line, self.src[start:self.pos - 1])
            if not c or (c in _META and not in_brace):
                break
            if c == "\\":
                nxt = self.peek(1)
                self.pos += 2
                if nxt == "\n":
                    self.line += 1
                else:
                    out.add(Lit(nxt, quoted=True))
            elif c == "'":
                end = self.src.find("'", self.pos + 1)
                if end < 0:
                    raise ParseError(line, "a single quote is not closed")
                text = self.src[self.pos + 1:end]
                self.line += text.count("\n")
                out.add(Lit(text, quoted=True))
                self.pos = end + 1
            elif c == '"':
                self.pos += 1
                out.add(*(self._quoted_text().parts or (Lit("", quoted=True),)))
            elif c == "$" and self.peek(1) == "'":
                out.add(self._ansi_c())
            elif c == "$" and self.peek(1) == '"':  # $"..." (locale translation): a double-quoted string
                self.pos += 1
            elif c == "$" or c == "`":
                out.add(self._dollar(quoted=False))
            else:
                self._char(c, out)
        return Word(out.done(), line, self.src[start:self.pos])

    def _char(self, c: str, out: _Parts) -> None:
        if c == "\n":
            self.line += 1
        out.buf.append(c)
        self.pos += 1

    def _quoted_text(self, heredoc: bool = False) -> Word:
        """Inside double quotes (or a here-document body): literal text and `$`/backquote expansions."""
        start, line = self.pos, self.line
        out = _Parts(quoted=True)
        while True:
            c = self.peek()
            if not c:
                if heredoc:
                    break
                raise ParseError(line, "a double quote is not closed")
            if c == '"' and not heredoc:
                self.pos += 1
                break
            if c == "\\" and self.peek(1) in ("$", "`", '"', "\\", "\n"):
                nxt = self.peek(1)
                if nxt == "\n":
                    self.line += 1
                elif nxt == '"' and heredoc:
                    out.buf.append("\\")
                    out.buf.append(nxt)
                else:
                    out.buf.append(nxt)
                self.pos += 2
            elif c == "`" or (c == "$" and self._expands(self.peek(1))):
                out.add(self._dollar(quoted=True))
            else:
                self._char(c, out)
        return Word(out.done(), line, self.src[start:self.pos])

    @staticmethod
    def _expands(nxt: str) -> bool:
        """Whether `$` followed by `nxt` starts an expansion (else it is a literal dollar)."""
        return bool(nxt) and (nxt in "{(@*#?$!0123456789" or bool(_NAME.match(nxt)))

    def _ansi_c(self) -> Lit:
        self.pos += 2
        out: list[str] = []
        escapes = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r", "a": "\a", "e": "\x1b"}
        while True:
            c = self.peek()
            if not c:
                raise self.error("a `$'` string is not closed")
            if c == "'":
                self.pos += 1
                return Lit("".join(out), quoted=True)
            if c == "\\" and self.peek(1) in escapes:
                out.append(escapes[self.peek(1)])
                self.pos += 2
                continue
            if c == "\n":
                self.line += 1
            out.append(c)
            self.pos += 1

    def _dollar(self, quoted: bool) -> Part:
        start = self.pos
        if self.peek() == "`":
            end = self.pos + 1
            while end < len(self.src) and self.src[end] != "`":
                end += 2 if self.src[end] == "\\" else 1
            if end >= len(self.src):
                raise self.error("a backquote is not closed")
            body = self.src[self.pos + 1:end].replace("\\`", "`")
            self.line += body.count("\n")
            self.pos = end + 1
            return CmdSub(body, self.src[start:self.pos], quoted)
        nxt = self.peek(1)
        if self.src.startswith("$((", self.pos):
            return self._arith(quoted)
        if nxt == "(":
            inner = Lexer(self.src, self.pos + 2, self.line, until_paren=True)
            inner.tokens()
            body = self.src[self.pos + 2:inner.pos]
            self.line = inner.line
            self.pos = inner.pos + 1
            return CmdSub(body, self.src[start:self.pos], quoted)
        if nxt == "{":
            return self._braced(quoted)
        m = _NAME.match(self.src, self.pos + 1)
        if m:
            self.pos = m.end()
            return Param(m.group(0), self.src[start:self.pos], quoted=quoted)
        if nxt and nxt in "@*#?$!-0123456789":
            self.pos += 2
            return Param(nxt, self.src[start:self.pos], quoted=quoted)
        self.pos += 1  # a lone `$`
        return Lit("$", quoted=quoted)

    def _arith(self, quoted: bool) -> Arith:
        start, depth, i = self.pos, 0, self.pos + 3
        while i < len(self.src):
            if self.src[i] == "(":
                depth += 1
            elif self.src[i] == ")":
                if depth == 0:
                    if self.src.startswith("))", i):
                        break
                    raise self.error("`$((` is not closed by `))`")
                depth -= 1
            i += 1
        else:
            raise self.error("`$((` is not closed")
        text = self.src[start + 3:i]
        expr = arith_word(text, self.line)
        self.line += text.count("\n")
        self.pos = i + 2
        return Arith(expr, self.src[start:self.pos], quoted)

    def _braced(self, quoted: bool) -> Param:
        start = self.pos
        self.pos += 2
        length = False
        if self.peek() == "#" and self.peek(1) not in ("}", ""):
            length = True
            self.pos += 1
        if self.peek() == "!":
            raise self.error(f"indirect expansion `{self._rest_of_brace(start)}` is outside what import reads")
        m = _NAME.match(self.src, self.pos)
        if m:
            name = m.group(0)
            self.pos = m.end()
        elif self.peek() and self.peek() in "@*#?$!0123456789":
            name = self.peek()
            self.pos += 1
        else:
            raise self.error(f"cannot read the expansion `{self._rest_of_brace(start)}`")
        index = None
        if self.peek() == "[":
            end = self.src.find("]", self.pos)
            if end < 0:
                raise self.error("`[` is not closed in an expansion")
            index = self.src[self.pos + 1:end]
            self.pos = end + 1
        if self.peek() == "}":
            self.pos += 1
            return Param(name, self.src[start:self.pos], index, quoted=quoted, length=length)
        op = next((o for o in _PARAM_OPS if self.src.startswith(o, self.pos)), None)
        if op is None or length:
            text = self._rest_of_brace(start)
            return Param(name, text, index, op="?unsupported", quoted=quoted)
        self.pos += len(op)
        arg = self._word(in_brace=True)
        return Param(name, self.src[start:self.pos], index, op, arg, quoted, length)

    def _rest_of_brace(self, start: int) -> str:
        end = self.src.find("}", start)
        text = self.src[start:end + 1 if end >= 0 else len(self.src)]
        if end >= 0:
            self.pos = end + 1
        return text


class Parser:
    """Tokens -> a tree of commands (the grammar of bash's man page, for the subset)."""

    def __init__(self, tokens: list[Tok], src: str):
        self.toks, self.i, self.src = tokens, 0, src

    def peek(self) -> Tok:
        return self.toks[self.i]

    def take(self) -> Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def reserved(self, tok: Tok | None = None) -> str | None:
        tok = tok or self.peek()
        return tok.word.plain() if tok.kind == "WORD" and tok.word else None

    def skip_newlines(self) -> None:
        while self.peek().kind == "NL":
            self.i += 1

    def expect_word(self, text: str) -> None:
        self.skip_newlines()
        tok = self.take()
        if self.reserved(tok) != text:
            raise ParseError(tok.line, f"expected `{text}`, found {describe(tok)}")

    def parse_list(self, stop: tuple[str, ...] = ()) -> Seq:
        line = self.peek().line
        items: list[Node] = []
        while True:
            while self.peek().kind == "NL" or (self.peek().kind == "OP" and self.peek().op in (";", "&")):
                self.i += 1
            tok = self.peek()
            if tok.kind == "EOF" or (tok.kind == "OP" and tok.op in stop) or self.reserved(tok) in stop:
                break
            items.append(self.parse_and_or())
            tok = self.peek()
            if tok.kind == "OP" and tok.op in (";", "&"):
                self.i += 1
            elif tok.kind not in ("NL", "EOF") and not (tok.kind == "OP" and tok.op in stop) \
                    and self.reserved(tok) not in stop:
                raise ParseError(tok.line, f"unexpected {describe(tok)}")
        return Seq(items, line)

    def parse_and_or(self) -> Node:
        first = self.parse_pipeline()
        rest: list[tuple[str, Node]] = []
        while self.peek().kind == "OP" and self.peek().op in ("&&", "||"):
            op = self.take().op
            self.skip_newlines()
            rest.append((op, self.parse_pipeline()))
        return AndOr(first, rest, getattr(first, "line", 0)) if rest else first

    def parse_pipeline(self) -> Node:
        line = self.peek().line
        negate = False
        if self.reserved() == "!":
            self.i += 1
            negate = True
        commands = [self.parse_command()]
        while self.peek().kind == "OP" and self.peek().op in ("|", "|&"):
            self.i += 1
            self.skip_newlines()
            commands.append(self.parse_command())
        return Pipeline(commands, negate, line) if negate or len(commands) > 1 else commands[0]

    def parse_command(self) -> Node:
        tok = self.peek()
        word = self.reserved(tok)
        if tok.kind == "ARITH":
            self.i += 1
            node: Node = ArithCmd(arith_word(tok.op, tok.line), tok.line)
        elif word == "if":
            node = self.parse_if()
        elif word in ("while", "until"):
            node = self.parse_while(word == "until")
        elif word == "for":
            node = self.parse_for()
        elif word in ("case", "select"):
            raise ParseError(tok.line, f"`{word}` is outside what import reads")
        elif word == "{":
            self.i += 1
            body = self.parse_list(stop=("}",))
            self.expect_word("}")
            node = Group(body, False, tok.line)
        elif tok.kind == "OP" and tok.op == "(":
            self.i += 1
            body = self.parse_list(stop=(")",))
            close = self.take()
            if close.kind != "OP" or close.op != ")":
                raise ParseError(close.line, f"expected `)`, found {describe(close)}")
            node = Group(body, True, tok.line)
        elif word == "function":
            self.i += 1
            name_tok = self.take()
            name = self.reserved(name_tok)
            if name is None:
                raise ParseError(name_tok.line, "expected a function name after `function`")
            if self.peek().kind == "OP" and self.peek().op == "(":
                self.i += 1
                self._close_paren()
            self.skip_newlines()
            node = FuncDef(name, self.parse_command(), tok.line)
        elif word is not None and word not in RESERVED and self.toks[self.i + 1].kind == "OP" \
                and self.toks[self.i + 1].op == "(" and _NAME.fullmatch(word.replace("-", "_").replace(".", "_")):
            self.i += 2
            self._close_paren()
            self.skip_newlines()
            node = FuncDef(word, self.parse_command(), tok.line)
        elif word in RESERVED and word not in ("[[", "]]"):
            raise ParseError(tok.line, f"unexpected `{word}`")
        else:
            return self.parse_simple()
        self._skip_redirections()
        return node

    def _close_paren(self) -> None:
        tok = self.take()
        if tok.kind != "OP" or tok.op != ")":
            raise ParseError(tok.line, f"expected `)`, found {describe(tok)}")

    def _skip_redirections(self) -> None:
        while self.peek().kind == "OP" and self.peek().op in _REDIRECTS:
            op = self.take()
            target = self.take()
            if target.kind not in ("WORD", "HEREDOC"):
                raise ParseError(op.line, f"`{op.op}` has no target")

    def parse_if(self) -> If:
        line = self.take().line
        clauses = []
        cond = self.parse_list(stop=("then",))
        self.expect_word("then")
        body = self.parse_list(stop=("elif", "else", "fi"))
        clauses.append((cond, body))
        otherwise = None
        while True:
            tok = self.take()
            word = self.reserved(tok)
            if word == "elif":
                cond = self.parse_list(stop=("then",))
                self.expect_word("then")
                clauses.append((cond, self.parse_list(stop=("elif", "else", "fi"))))
            elif word == "else":
                otherwise = self.parse_list(stop=("fi",))
                self.expect_word("fi")
                break
            elif word == "fi":
                break
            else:
                raise ParseError(tok.line, f"`if` at line {line} is not closed by `fi` (found {describe(tok)})")
        return If(clauses, otherwise, line)

    def parse_while(self, until: bool) -> While:
        line = self.take().line
        cond = self.parse_list(stop=("do",))
        self.expect_word("do")
        body = self.parse_list(stop=("done",))
        self.expect_word("done")
        return While(cond, body, until, line)

    def parse_for(self) -> For | ArithFor:
        line = self.take().line
        tok = self.take()
        if tok.kind == "ARITH":
            pieces = tok.op.split(";")
            if len(pieces) != 3:
                raise ParseError(line, f"`for (({tok.op}))` needs three expressions separated by `;`")
            while self.peek().kind == "NL" or (self.peek().kind == "OP" and self.peek().op == ";"):
                self.i += 1
            self.expect_word("do")
            body = self.parse_list(stop=("done",))
            self.expect_word("done")
            init, cond, step = (arith_word(p, line) for p in pieces)
            return ArithFor(init, cond, step, body, line)
        var = self.reserved(tok)
        if var is None or not _NAME.fullmatch(var):
            raise ParseError(line, f"expected a variable name after `for`, found {describe(tok)}")
        words: list[Word] | None = None
        self.skip_newlines()
        if self.reserved() == "in":
            self.i += 1
            words = []
            while self.peek().kind == "WORD":
                words.append(self.take().word)  # type: ignore[arg-type]
        while self.peek().kind == "NL" or (self.peek().kind == "OP" and self.peek().op == ";"):
            self.i += 1
        self.expect_word("do")
        body = self.parse_list(stop=("done",))
        self.expect_word("done")
        return For(var, words, body, line)

    def parse_simple(self) -> Simple:
        start = self.peek()
        assigns: list[Assign] = []
        words: list[Word] = []
        heredocs: list[HereDoc] = []
        test = False
        while True:
            tok = self.peek()
            if tok.kind == "WORD" and tok.word is not None:
                if test and tok.word.plain() == "]]":
                    words.append(tok.word)
                    self.i += 1
                    test = False
                    continue
                assign = None if words else split_assignment(tok.word)
                if assign is not None:
                    assigns.append(assign)
                else:
                    if not words and tok.word.plain() == "[[":
                        test = True
                    words.append(tok.word)
                self.i += 1
            elif tok.kind == "ARRAY" and tok.array is not None:
                assigns.append(tok.array)  # `declare -a X=(...)` too: an assignment of the command
                self.i += 1
            elif test and tok.kind == "OP" and tok.op in ("&&", "||", "(", ")", "<", ">", "!"):
                words.append(Word((Lit(tok.op),), tok.line, tok.op))
                self.i += 1
            elif tok.kind == "OP" and tok.op in _REDIRECTS:
                self.i += 1
                target = self.take()
                if target.kind == "HEREDOC" and target.heredoc is not None:
                    heredocs.append(target.heredoc)
                elif target.kind != "WORD":
                    raise ParseError(tok.line, f"`{tok.op}` has no target")
            else:
                break
        if test:
            raise ParseError(start.line, "`[[` is not closed by `]]`")
        if not assigns and not words:
            raise ParseError(start.line, f"unexpected {describe(start)}")
        src = " ".join([*(a.name + "=..." for a in assigns), *(w.src for w in words)])
        return Simple(assigns, words, start.line, src, heredocs)


_COMMAND_START_WORDS = {"for", "then", "do", "else", "elif", "if", "while", "until", "{", "!"}


def _arith_position(out: list[Tok]) -> bool:
    """Whether `((` here starts an arithmetic command (a command starts here), not two subshells."""
    if not out:
        return True
    last = out[-1]
    if last.kind == "NL" or (last.kind == "OP" and last.op in (";", "&&", "||", "|", "&", "(")):
        return True
    return last.kind == "WORD" and last.word is not None and last.word.plain() in _COMMAND_START_WORDS


def arith_word(text: str, line: int) -> Word:
    """An arithmetic expression's text as a word: its `$` expansions apply, the rest is literal."""
    return Lexer(text + '"', line=line)._quoted_text()


def split_assignment(word: Word) -> Assign | None:
    """`NAME=value` (and `NAME+=`, `NAME[i]=`) as an assignment; None when the word is not one."""
    first = word.parts[0] if word.parts else None
    if not isinstance(first, Lit) or first.quoted:
        return None
    m = _ASSIGN.match(first.text)
    if not m:
        return None
    rest = first.text[m.end():]
    parts = ((Lit(rest),) if rest else ()) + word.parts[1:]
    value = Word(parts or (Lit("", quoted=True),), word.line, word.src[m.end():])
    index = m.group(2)[1:-1] if m.group(2) else None
    return Assign(m.group(1), word.line, value=value, append=bool(m.group(3)), index=index)


def describe(tok: Tok) -> str:
    if tok.kind == "WORD" and tok.word is not None:
        return f"`{tok.word.src}`"
    if tok.kind == "OP":
        return f"`{tok.op}`"
    return {"NL": "the end of the line", "EOF": "the end of the file", "ARRAY": "an array"}.get(tok.kind, tok.kind)


def parse(src: str) -> Seq:
    """A script's text -> its command tree; ParseError names the line of what it cannot read."""
    tokens = Lexer(src).tokens()
    parser = Parser(tokens, src)
    tree = parser.parse_list()
    tok = parser.peek()
    if tok.kind != "EOF":
        raise ParseError(tok.line, f"unexpected {describe(tok)}")
    return tree
