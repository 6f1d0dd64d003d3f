"""A launch script evaluated as bash would, without running a single command.

The script is followed from its first line with an empty environment (plus what `--env` gives).
What import cannot know stays visible: an expansion of a variable the script never sets, a
`$(...)` other than the few pure ones evaluated here (`dirname`, `pwd` after `cd`, `seq`, `echo`,
`printf`, `cat <<EOF`), a file test, a command's exit status. Such a value keeps its source text and
a `Mark` saying why; a value the script chose because of one (`if [ -z "$NUM_GPUS" ]; then
NUM_GPUS=8`) carries a `branch` mark. The flag reader refuses unknown values and reports marked
ones, so an imported value is either the script's own or said to be an assumption.

A test that depends on an unknown value and would stop the script (`[ -z "$BASE" ] && exit 1`) is
taken the way that goes on: the guard's variable then shows up, unknown, where the argv uses it.
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Union

from trainstack.script_import import arith
from trainstack.script_import.bash import (
    ArithCmd,
    ArithFor,
    Arith,
    AndOr,
    Assign,
    CmdSub,
    For,
    FuncDef,
    Group,
    If,
    Lit,
    Node,
    Param,
    ParseError,
    Pipeline,
    Seq,
    Simple,
    While,
    Word,
    parse,
)

DIRECT = ("env", "cmd", "expansion")  # kinds whose value is not known at all
MAX_ITERATIONS = 100_000
MAX_SOURCE_DEPTH = 16
LAUNCH_FILES = ("train.py", "train_async.py")  # slime's entrypoints
_PYTHON = re.compile(r"python[\d.]*")
_DECLARE = ("export", "declare", "typeset", "local", "readonly")


@dataclass(frozen=True)
class Mark:
    """Why a value is not simply the script's: `env` a variable the script never sets, `cmd` a
    command import does not run, `expansion` a `${...}` form it does not evaluate, `default` the
    `${X:-d}` default taken because X is not set, `branch` a value chosen by a test on such values."""

    kind: str
    what: str
    line: int
    because: frozenset["Mark"] = frozenset()

    def describe(self) -> str:
        if self.kind == "env":
            return f"{self.what} (not set in the script; line {self.line})"
        if self.kind == "default":
            return f"{self.what} not set, so its default was taken (line {self.line})"
        if self.kind == "branch":
            return f"the test `{self.what}` (line {self.line})"
        return f"`{self.what}` (line {self.line}), which import does not run" if self.kind == "cmd" \
            else f"`{self.what}` (line {self.line}), an expansion import does not evaluate"


def describe_all(marks) -> str:
    """Marks of one kind and subject said once, with every line they are on."""
    lines: dict[tuple[str, str], list[int]] = {}
    for m in sorted(marks, key=lambda m: (m.line, m.what)):
        lines.setdefault((m.kind, m.what), [])
        if m.line not in lines[(m.kind, m.what)]:
            lines[(m.kind, m.what)].append(m.line)
    out = []
    for (kind, what), at in lines.items():
        one = Mark(kind, what, at[0]).describe()
        if len(at) > 1:
            one = one.replace(f"line {at[0]}", "lines " + ", ".join(map(str, at)))
        out.append(one)
    return ", ".join(out)


@dataclass(frozen=True)
class Text:
    text: str
    marks: frozenset[Mark] = frozenset()

    @property
    def unknown(self) -> list[Mark]:
        return sorted((m for m in self.marks if m.kind in DIRECT), key=lambda m: (m.line, m.what))

    @property
    def seen(self) -> str:
        """What a test sees: an unknown value is taken as empty (no such variable, no output)."""
        return "" if self.unknown else self.text


Value = Union[Text, list[Text], None]  # None: unset by the script itself


@dataclass
class Token:
    text: Text
    line: int


@dataclass
class Launch:
    entrypoint: str
    argv: list[Token]
    line: int
    runtime_env_json: Text | None = None
    marks: frozenset[Mark] = frozenset()  # the branch this launch is in, if chosen by an unknown test


@dataclass
class Reading:
    """What a script does, as far as import can tell."""

    path: Path
    launch: Launch
    sourced: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    slime_root: Path | None = None  # the checkout sourced files fall back to


class ScriptError(Exception):
    """The script cannot be read: `line` and a message, with a fix."""

    def __init__(self, line: int, message: str, fix: str = "", path: Path | None = None):
        self.line, self.message, self.fix, self.path = line, message, fix, path
        super().__init__(f"line {line}: {message}")


class ScriptExit(Exception):
    def __init__(self, line: int, code: Text, marks: frozenset[Mark]):
        self.line, self.code, self.marks = line, code, marks
        super().__init__(f"exit at line {line}")


class _Return(Exception):
    pass


class Unknowable(Exception):
    """Inside `$(...)`: a command import does not evaluate."""


_MISSING = object()


def _flatten(marks: frozenset[Mark] | set[Mark]) -> frozenset[Mark]:
    out: set[Mark] = set()
    for m in marks:
        out |= m.because if m.kind == "branch" else {m}
    return frozenset(out)


class Shell:
    def __init__(self, script: Path, env: dict[str, str], slime_root: Path | None, pure: bool = False):
        self.script, self.env, self.slime_root, self.pure = script, env, slime_root, pure
        self.vars: dict[str, Value] = {}
        self.funcs: dict[str, Node] = {}
        self.positional: list[Text] = []
        self.control: tuple[Mark, ...] = ()
        self.launches: list[Launch] = []
        self.sourced: list[Path] = []
        self.notes: list[str] = []
        self.out: list[Text] = []  # pure mode: what the substitution prints
        self.cwd: str | None = None
        self.files: list[Path] = [script]
        self.depth = 0
        self.base_line = 0  # inside `$(...)`: the line the substitution is on, less one

    # --- state for the branches a guard rolls back ----------------------------------------------
    def snapshot(self) -> tuple:
        return (dict(self.vars), dict(self.funcs), list(self.positional), len(self.launches), len(self.sourced),
                len(self.notes), len(self.out), self.cwd)

    def restore(self, snap: tuple) -> None:
        self.vars, self.funcs, self.positional = dict(snap[0]), dict(snap[1]), list(snap[2])
        del self.launches[snap[3]:], self.sourced[snap[4]:], self.notes[snap[5]:], self.out[snap[6]:]
        self.cwd = snap[7]

    # --- expansion --------------------------------------------------------------------------------
    def lookup(self, name: str) -> object:
        if name in self.vars:
            return self.vars[name]
        if name in self.env:
            return Text(self.env[name])
        if name == "BASH_SOURCE":
            return [Text(str(self.files[-1]))]
        return _MISSING

    def param(self, p: Param, line: int) -> Text | list[Text]:
        if p.op == "?unsupported":
            return Text(p.src, frozenset({Mark("expansion", p.src, line)}))
        name = p.name
        if name in ("@", "*"):
            value: object = list(self.positional)
        elif name == "#":
            value = Text(str(len(self.positional)))
        elif name == "0":
            value = Text(str(self.script))
        elif name.isdigit():
            n = int(name)
            value = self.positional[n - 1] if n <= len(self.positional) else None
        elif name in ("?", "$", "!", "-"):
            return Text(p.src, frozenset({Mark("cmd", p.src, line)}))
        else:
            value = self.lookup(name)
        if p.index is not None:
            value = self._indexed(value, p, line)
            if isinstance(value, list):
                if p.length:
                    return Text(str(len(value)))
                return value
        elif isinstance(value, list) and name not in ("@", "*"):
            value = value[0] if value else None  # $ARR is ${ARR[0]}
        if isinstance(value, list):
            return value
        if p.length:
            if value is _MISSING or (isinstance(value, Text) and value.unknown):
                return Text(p.src, frozenset({Mark("env", name, line)}))
            return Text(str(len(value.text)) if isinstance(value, Text) else "0")
        return self._operate(p, value, line)

    def _indexed(self, value: object, p: Param, line: int) -> object:
        index = p.index or ""
        if index in ("@", "*"):
            if value is _MISSING:  # an array the script never sets (no environment holds arrays)
                self.notes.append(f"line {line}: {p.src} is never set in the script: empty, as bash has it")
                return []
            if value is None:
                return []
            return value if isinstance(value, list) else [value]
        try:
            i = arith.evaluate(index, self._arith_get(line), self._arith_put)
        except (arith.Unknown, arith.ArithError):
            return Text(p.src, frozenset({Mark("expansion", p.src, line)}))
        if isinstance(value, list):
            return value[i] if -len(value) <= i < len(value) else None
        return value if i == 0 else None

    def _operate(self, p: Param, value: object, line: int) -> Text:
        op, name = p.op, p.name
        missing = value is _MISSING
        known = value if isinstance(value, Text) else None
        if not op:
            if missing:
                return Text(p.src, frozenset({Mark("env", name, line)}))
            return known or Text("")
        if op in (":-", "-", ":=", "="):
            use_default = missing or value is None or (op in (":-", ":=") and known is not None
                                                       and not known.unknown and known.text == "")
            if not use_default:
                return known or Text("")
            default = self.scalar(p.arg) if p.arg else Text("")
            if missing:
                default = Text(default.text, default.marks | {Mark("default", name, line)})
            if op in (":=", "="):
                self.vars[name] = default
            return default
        if op in (":+", "+"):
            is_set = known is not None and (op == "+" or known.seen != "")
            alt = (self.scalar(p.arg) if p.arg else Text("")) if is_set else Text("")
            return Text(alt.text, alt.marks | ({Mark("default", name, line)} if missing else set()))
        if op in (":?", "?"):
            if missing:
                return Text(p.src, frozenset({Mark("env", name, line)}))
            return known or Text("")
        if missing:
            return Text(p.src, frozenset({Mark("env", name, line)}))
        base = known or Text("")
        if base.unknown:
            return Text(p.src, base.marks)
        arg = self.scalar(p.arg) if p.arg else Text("")
        if arg.unknown:
            return Text(p.src, arg.marks)
        marks = base.marks | arg.marks
        s = base.text
        if op in ("#", "##", "%", "%%"):
            return Text(_trim(s, arg.text, op), marks)
        pattern, _, repl = arg.text.partition("/") if p.arg else ("", "", "")
        if any(c in pattern for c in "*?["):
            return Text(p.src, frozenset({Mark("expansion", p.src, line)}))
        if not pattern:
            return Text(s, marks)
        return Text(s.replace(pattern, repl) if op == "//" else s.replace(pattern, repl, 1), marks)

    def cmdsub(self, part: CmdSub, line: int) -> Text:
        marks = frozenset({Mark("cmd", _short(part.src), line)})
        try:
            tree = parse(part.body)
        except ParseError:
            return Text(part.src, marks)
        child = Shell(self.script, self.env, self.slime_root, pure=True)
        child.vars, child.funcs, child.positional = dict(self.vars), dict(self.funcs), list(self.positional)
        child.files, child.cwd = list(self.files), self.cwd
        try:
            child.run(tree, base_line=line - 1)
        except (Unknowable, ScriptExit, ScriptError, arith.ArithError):
            return Text(part.src, marks)
        joined = "".join(t.text for t in child.out).rstrip("\n")
        got = frozenset().union(*(t.marks for t in child.out)) if child.out else frozenset()
        if any(m.kind in DIRECT for m in got):
            return Text(part.src, got | marks)
        return Text(joined, got)

    def arith_text(self, expr: Word, src: str, line: int) -> Text:
        text = self.scalar(expr)
        if text.unknown:
            return Text(src, text.marks)
        used: set[Mark] = set(text.marks)
        try:
            value = arith.evaluate(text.text, self._arith_get(line, used), self._arith_put)
        except arith.Unknown:
            return Text(src, frozenset(used))
        except arith.ArithError as ex:
            raise ScriptError(line, f"`{src}`: {ex}", "fix the arithmetic expression") from None
        return Text(str(value), frozenset(used))

    def _arith_get(self, line: int, used: set[Mark] | None = None):
        def get(name: str) -> int:
            value = self.lookup(name)
            if isinstance(value, list):
                value = value[0] if value else None
            if value is _MISSING:
                if used is not None:
                    used.add(Mark("env", name, line))
                raise arith.Unknown(name)
            if value is None:
                return 0
            assert isinstance(value, Text)
            if used is not None:
                used.update(value.marks)
            if value.unknown:
                raise arith.Unknown(name)
            text = value.text.strip()
            if not text:
                return 0
            if re.fullmatch(r"-?\d+", text):
                return int(text)
            return arith.evaluate(text, get, self._arith_put)
        return get

    def _arith_put(self, name: str, value: int) -> None:
        self.vars[name] = Text(str(value), frozenset(self.control))

    def scalar(self, word: Word | None) -> Text:
        """A word without field splitting (assignments, `${X:-word}`, here-documents)."""
        if word is None:
            return Text("")
        texts: list[str] = []
        marks: set[Mark] = set()
        for part in word.parts:
            value = self.part(part, word.line)
            items = value if isinstance(value, list) else [value]
            sep = self._ifs()[:1] if isinstance(part, Param) and part.index == "*" or (
                isinstance(part, Param) and part.name == "*") else " "
            texts.append(sep.join(t.text for t in items))
            for t in items:
                marks |= t.marks
        return Text("".join(texts), frozenset(marks))

    def part(self, part, line: int) -> Text | list[Text]:
        if isinstance(part, Lit):
            return Text(part.text)
        if isinstance(part, Param):
            return self.param(part, line)
        if isinstance(part, CmdSub):
            return self.cmdsub(part, line)
        if isinstance(part, Arith):
            return self.arith_text(part.expr, part.src, line)
        raise AssertionError(part)

    def _ifs(self) -> str:
        ifs = self.vars.get("IFS")
        return ifs.text if isinstance(ifs, Text) else " \t\n"

    def fields(self, word: Word) -> list[Text]:
        """A word -> the fields bash makes of it (quoted parts stay whole, unquoted expansions split)."""
        out: list[tuple[list[str], set[Mark], list[bool]]] = []
        is_open = [False]

        def add(t: Text, quoted: bool) -> None:
            if not is_open[0]:
                out.append(([], set(), [False]))
                is_open[0] = True
            texts, marks, q = out[-1]
            texts.append(t.text)
            marks |= t.marks
            q[0] = q[0] or quoted

        def cut() -> None:
            is_open[0] = False

        def split_add(t: Text) -> None:
            ifs = self._ifs()
            if t.unknown or not ifs:
                add(t, False)
                return
            for k, piece in enumerate(re.split("[" + re.escape(ifs) + "]+", t.text)):
                if k > 0:
                    cut()
                if piece:
                    add(Text(piece, t.marks), False)

        for part in word.parts:
            quoted = getattr(part, "quoted", False)
            value = self.part(part, word.line)
            if isinstance(value, list):
                if quoted and isinstance(part, Param) and (part.index == "*" or part.name == "*"):
                    marks = frozenset().union(*(v.marks for v in value)) if value else frozenset()
                    add(Text(self._ifs()[:1].join(v.text for v in value), marks), True)
                    continue
                for k, item in enumerate(value):
                    if k > 0:
                        cut()
                    if quoted:
                        add(item, True)
                    else:
                        split_add(item)
            elif quoted or isinstance(part, Lit):
                add(value, quoted)
            else:
                split_add(value)
        return [Text("".join(texts), frozenset(marks)) for texts, marks, q in out
                if q[0] or "".join(texts) or any(m.kind in DIRECT for m in marks)]

    # --- running ----------------------------------------------------------------------------------
    def run(self, tree: Node, base_line: int = 0) -> None:
        self.base_line = base_line
        self.exec(tree)

    def exec(self, node: Node | None) -> tuple[int, frozenset[Mark]]:
        if node is None:
            return 0, frozenset()
        if isinstance(node, Seq):
            status: tuple[int, frozenset[Mark]] = (0, frozenset())
            for item in node.items:
                status = self.exec(item)
            return status
        if isinstance(node, Simple):
            return self.simple(node)
        if isinstance(node, AndOr):
            return self.and_or(node)
        if isinstance(node, Pipeline):
            if self.pure and len(node.commands) > 1:
                raise Unknowable("a pipeline")
            st, marks = 0, frozenset[Mark]()
            for cmd in node.commands:
                st, m = self.exec(cmd)
                marks |= m
            return (int(not st) if node.negate else st), marks
        if isinstance(node, If):
            return self.if_(node)
        if isinstance(node, For):
            return self.for_(node)
        if isinstance(node, ArithFor):
            return self.arith_for(node)
        if isinstance(node, While):
            if self.pure:
                raise Unknowable("a loop")
            self._no_launch_inside(node, "a `while` loop, whose number of turns import cannot know")
            return 0, frozenset({Mark("cmd", "while ...", node.line)})
        if isinstance(node, Group):
            if node.subshell:
                snap = self.snapshot()
                result = self.exec(node.body)
                keep = (self.launches[snap[3]:], self.sourced[snap[4]:], self.notes[snap[5]:], self.out[snap[6]:])
                self.restore(snap)
                self.launches += keep[0]
                self.sourced += keep[1]
                self.notes += keep[2]
                self.out += keep[3]
                return result
            return self.exec(node.body)
        if isinstance(node, FuncDef):
            self.funcs[node.name] = node.body
            return 0, frozenset()
        if isinstance(node, ArithCmd):
            text = self.arith_text(node.expr, f"(({node.expr.src}))", node.line)
            if text.unknown:
                return 1, text.marks
            return (0 if text.text not in ("0", "") else 1), text.marks
        raise AssertionError(node)

    def and_or(self, node: AndOr) -> tuple[int, frozenset[Mark]]:
        status, marks = self.exec(node.first)
        for op, right in node.rest:
            if (op == "&&") != (status == 0):
                continue
            if not marks:
                status, more = self.exec(right)
                marks |= more
                continue
            snap = self.snapshot()
            try:
                with self.under(marks, _cond_src(node.first), node.line):
                    status, more = self.exec(right)
                marks |= more
            except ScriptExit:  # a guard on a value import cannot know: go on as if it held
                self.restore(snap)
                self.notes.append(f"line {node.line}: the script would stop here if "
                                  f"{', '.join(m.describe() for m in sorted(_flatten(marks), key=_order))} "
                                  "made its test fail; import went on as if it passed")
                status = 1 if op == "&&" else 0
        return status, marks

    class _Under:
        def __init__(self, shell: "Shell", mark: Mark | None):
            self.shell, self.mark, self.saved = shell, mark, shell.control

        def __enter__(self) -> None:
            if self.mark is not None:
                self.shell.control = (*self.saved, self.mark)

        def __exit__(self, *exc) -> None:
            self.shell.control = self.saved

    def under(self, marks: frozenset[Mark], src: str, line: int) -> "Shell._Under":
        base = _flatten(marks)
        return Shell._Under(self, Mark("branch", _short(src), line, base) if base else None)

    def if_(self, node: If) -> tuple[int, frozenset[Mark]]:
        marks: frozenset[Mark] = frozenset()
        chosen: Seq | None = node.otherwise
        bodies: list[Seq | None] = [*(body for _, body in node.clauses), node.otherwise]
        src = ""
        for cond, body in node.clauses:
            status, m = self.exec(cond)
            marks |= m
            src = src or _cond_src(cond)
            if status == 0:
                chosen = body
                break
        if not marks:
            return self.exec(chosen) if chosen is not None else (0, frozenset())
        first_exit: ScriptExit | None = None
        order: list[Seq | None] = [chosen, *(b for b in bodies if b is not chosen)]
        for k, branch in enumerate(order):
            snap = self.snapshot()
            try:
                with self.under(marks, src, node.line):
                    result = self.exec(branch)
            except ScriptExit as ex:
                self.restore(snap)
                first_exit = first_exit or ex
                continue
            if k > 0 and first_exit is not None:
                self.notes.append(f"line {node.line}: the script would stop at line {first_exit.line} if "
                                  f"{', '.join(m.describe() for m in sorted(_flatten(marks), key=_order))} "
                                  "decided the test so; import went on along the branch that does not stop")
            return result
        assert first_exit is not None
        raise first_exit

    def for_(self, node: For) -> tuple[int, frozenset[Mark]]:
        items: list[Text] = []
        for word in node.words if node.words is not None else []:
            items += self.fields(word)
        if node.words is None:
            items = list(self.positional)
        unknown = [m for t in items for m in t.unknown]
        if unknown:
            if self.pure:
                raise Unknowable("a loop")
            self._no_launch_inside(node, f"a `for` loop over {unknown[0].describe()}")
            return 0, frozenset(unknown)
        status: tuple[int, frozenset[Mark]] = (0, frozenset())
        for item in items[:MAX_ITERATIONS]:
            self.vars[node.var] = Text(item.text, item.marks | frozenset(self.control))
            status = self.exec(node.body)
        return status

    def arith_for(self, node: ArithFor) -> tuple[int, frozenset[Mark]]:
        self.arith_text(node.init, node.init.src, node.line)
        for _ in range(MAX_ITERATIONS):
            cond = self.arith_text(node.cond, node.cond.src, node.line) if node.cond.src.strip() else Text("1")
            if cond.unknown:
                if self.pure:
                    raise Unknowable("a loop")
                self._no_launch_inside(node, f"a `for ((...))` loop whose test depends on {cond.unknown[0].describe()}")
                return 0, cond.marks
            if cond.text == "0":
                return 0, frozenset()
            self.exec(node.body)
            self.arith_text(node.step, node.step.src, node.line)
        raise ScriptError(node.line, f"the loop runs more than {MAX_ITERATIONS} times", "simplify the loop")

    def _no_launch_inside(self, node: Node, what: str) -> None:
        for simple in _simples(node):
            if any(w.src.rstrip("'\"").endswith(LAUNCH_FILES) for w in simple.words):
                raise ScriptError(simple.line, f"slime is launched inside {what}",
                                  "write the launch outside the loop (import reads one launch, not a loop of them)")

    def assign(self, a: Assign, export_marks: frozenset[Mark] = frozenset()) -> None:
        control = frozenset(self.control)
        if a.array is not None:
            items: list[Text] = []
            for w in a.array:
                items += [Text(t.text, t.marks | control) for t in self.fields(w)]
            old = self.vars.get(a.name)
            if a.append:
                base = old if isinstance(old, list) else ([old] if isinstance(old, Text) else [])
                items = base + items
            self.vars[a.name] = items
            return
        value = self.scalar(a.value)
        value = Text(value.text, value.marks | control)
        if a.index is not None:
            arr = self.vars.get(a.name)
            arr = list(arr) if isinstance(arr, list) else ([arr] if isinstance(arr, Text) else [])
            try:
                i = arith.evaluate(a.index, self._arith_get(a.line), self._arith_put)
            except (arith.Unknown, arith.ArithError):
                raise ScriptError(a.line, f"cannot tell which element `{a.name}[{a.index}]` sets",
                                  "use a literal index") from None
            while len(arr) <= i:
                arr.append(Text(""))
            arr[i] = value
            self.vars[a.name] = arr
            return
        if a.append:
            old = self.vars.get(a.name)
            if isinstance(old, list):
                self.vars[a.name] = [*old[:1], *old[1:]] if not old else [Text(old[0].text + value.text,
                                                                          old[0].marks | value.marks), *old[1:]]
                return
            if isinstance(old, Text):
                value = Text(old.text + value.text, old.marks | value.marks)
        self.vars[a.name] = value

    def simple(self, node: Simple) -> tuple[int, frozenset[Mark]]:
        line = node.line + self.base_line
        if not node.words:
            for a in node.assigns:
                self.assign(a)
            return 0, frozenset()
        fields: list[Text] = []
        lines: list[int] = []
        for w in node.words:
            got = self.fields(w)
            fields += got
            lines += [w.line + self.base_line] * len(got)
        if not fields:
            for a in node.assigns:
                self.assign(a)
            return 0, frozenset()
        name = fields[0].text
        args = fields[1:]
        if name.startswith("--") and not self.pure:
            after = f" after the launch at line {self.launches[-1].line}" if self.launches else ""
            raise ScriptError(line, f"`{_short(' '.join(f.text for f in fields), 50)}` is run as a command{after}: "
                              "the line before it probably misses its closing `\\`, so bash ends the launch there",
                              f"end line {line - 1} with `\\` (as written, slime would get only the flags before "
                              "it)")
        if fields[0].unknown:
            if self.pure:
                raise Unknowable(name)
            return 0, frozenset(fields[0].marks)
        if name in _DECLARE:
            for a in node.assigns:
                self.assign(a)
            for arg in args:
                if arg.text.startswith("-") or "=" not in arg.text:
                    continue
                var, _, val = arg.text.partition("=")
                if re.fullmatch(r"[A-Za-z_]\w*", var):
                    self.vars[var] = Text(val, arg.marks | frozenset(self.control))
            return 0, frozenset()
        if name == "unset":
            for arg in args:
                if not arg.text.startswith("-"):
                    self.vars[arg.text] = None
            return 0, frozenset()
        if name in ("true", ":"):
            return 0, frozenset()
        if name == "false":
            return 1, frozenset()
        if name in ("[", "test", "[["):
            return self.test(args, line, node.src)
        if name == "exit":
            raise ScriptExit(line, args[0] if args else Text("0"), frozenset(self.control))
        if name == "return":
            raise _Return()
        if name == "printf":
            return self.printf(args, line)
        if name == "echo":
            if self.pure:
                self.echo(args)
            return 0, frozenset()
        if name == "set":
            if args and args[0].text == "--":
                self.positional = list(args[1:])
            return 0, frozenset()
        if name == "shift":
            self.positional = self.positional[1:]
            return 0, frozenset()
        if node.assigns and (name in self.funcs or name in ("source", ".")):
            return self._with_prefix(node)
        if name in self.funcs:
            saved = self.positional
            self.positional = list(args)
            try:
                return self.exec(self.funcs[name])
            except _Return:
                return 0, frozenset()
            finally:
                self.positional = saved
        if self.pure:
            return self.pure_command(name, args, node)
        if name in ("source", "."):
            return self.source(args, line)
        if name == "cd":
            target = args[-1] if args else None
            if target is not None and not target.unknown and os.path.isabs(target.text):
                self.cwd = os.path.normpath(target.text)
            else:
                self.cwd = None
            return 0, frozenset()
        if name in ("read", "mapfile", "readarray"):
            for arg in args:
                if re.fullmatch(r"[A-Za-z_]\w*", arg.text):
                    self.vars[arg.text] = Text(f"$({name})", frozenset({Mark("cmd", name, line)}))
            return 0, frozenset()
        if name == "eval" and any(a.text.rstrip("'\"").endswith(LAUNCH_FILES) or "train" in a.text for a in args):
            raise ScriptError(line, "slime is launched through `eval`, whose text import does not run",
                              "write the launch command out in the script")
        launch = self.launch_of(fields, lines, line)
        if launch is not None:
            self.launches.append(launch)
            return 0, frozenset()
        return 0, frozenset({Mark("cmd", _short(node.src), line)})

    def _with_prefix(self, node: Simple) -> tuple[int, frozenset[Mark]]:
        """`VAR=value source file` / `VAR=value func`: the variables hold for that command only."""
        saved = {a.name: self.vars.get(a.name, _MISSING) for a in node.assigns}
        for a in node.assigns:
            self.assign(a)
        try:
            return self.simple(Simple([], node.words, node.line, node.src, node.heredocs))
        finally:
            for var, old in saved.items():
                if old is _MISSING:
                    self.vars.pop(var, None)
                else:
                    self.vars[var] = old  # type: ignore[assignment]

    def launch_of(self, fields: list[Text], lines: list[int], line: int) -> Launch | None:
        """`[ray job submit ... --] python3 [-u] .../train.py ARGS` -> the launch."""
        for i, f in enumerate(fields):
            if not _PYTHON.fullmatch(os.path.basename(f.text)):
                continue
            j = i + 1
            while j < len(fields) and fields[j].text.startswith("-") and fields[j].text not in ("-m", "-c", "-"):
                j += 2 if fields[j].text in ("-X", "-W") else 1
            if j >= len(fields) or not fields[j].text.endswith(LAUNCH_FILES):
                continue
            tokens = [Token(t, n) for t, n in zip(fields[j + 1:], lines[j + 1:])]
            env_json = None
            for k, pre in enumerate(fields[:i]):
                if pre.text.startswith("--runtime-env-json="):
                    env_json = Text(pre.text.split("=", 1)[1], pre.marks)
                elif pre.text == "--runtime-env-json" and k + 1 < i:
                    env_json = fields[k + 1]
            return Launch(os.path.basename(fields[j].text), tokens, line, env_json, frozenset(self.control))
        return None

    def source(self, args: list[Text], line: int) -> tuple[int, frozenset[Mark]]:
        if not args:
            raise ScriptError(line, "`source` without a file")
        target = args[0]
        if target.unknown:
            raise ScriptError(line, f"cannot tell which file `source` reads: it depends on "
                              f"{', '.join(m.describe() for m in target.unknown)}",
                              _env_fix(target.unknown))
        path = self.find_source(target.text)
        if path is None:
            raise ScriptError(line, f"`source {target.text}`: no such file next to the script or in the slime "
                              "checkout", "import a script from its slime checkout, or give --slime-root")
        if self.depth >= MAX_SOURCE_DEPTH:
            raise ScriptError(line, f"sources nest deeper than {MAX_SOURCE_DEPTH} files", "")
        try:
            tree = parse(path.read_text(encoding="utf-8"))
        except ParseError as ex:
            raise ScriptError(ex.line, ex.message, "import reads the bash subset described in docs/import.md",
                              path=path) from None
        except (OSError, UnicodeDecodeError) as ex:
            raise ScriptError(line, f"cannot read {path}: {ex}", "") from None
        self.sourced.append(path)
        self.files.append(path)
        self.depth += 1
        saved_base = self.base_line
        self.base_line = 0
        try:
            self.exec(tree)
        except _Return:
            pass
        except ScriptError as ex:
            ex.path = ex.path or path
            raise
        finally:
            self.files.pop()
            self.depth -= 1
            self.base_line = saved_base
        return 0, frozenset()

    def find_source(self, text: str) -> Path | None:
        here = self.files[-1].parent
        candidates = [Path(text)] if os.path.isabs(text) else []
        if not os.path.isabs(text):
            candidates += [here / text] + ([Path(self.cwd) / text] if self.cwd else [])
            if self.slime_root is not None:
                candidates.append(self.slime_root / text)
        m = re.search(r"(?:^|/)(?:scripts/)?models/([^/]+\.sh)$", text)
        if m and self.slime_root is not None:
            candidates.append(self.slime_root / "scripts" / "models" / m.group(1))
        return next((Path(os.path.normpath(c)) for c in candidates if c.is_file()), None)

    # --- builtins ---------------------------------------------------------------------------------
    def echo(self, args: list[Text]) -> None:
        newline = True
        while args and args[0].text in ("-n", "-e", "-E", "-ne", "-en"):
            newline = newline and "n" not in args[0].text
            args = args[1:]
        marks = frozenset().union(*(a.marks for a in args)) if args else frozenset()
        self.out.append(Text(" ".join(a.text for a in args) + ("\n" if newline else ""), marks))

    def printf(self, args: list[Text], line: int) -> tuple[int, frozenset[Mark]]:
        target = None
        if len(args) >= 2 and args[0].text == "-v":
            target, args = args[1].text, args[2:]
        if not args:
            return 1, frozenset()
        fmt, values = args[0], args[1:]
        marks = frozenset().union(*(a.marks for a in args))
        if fmt.unknown or any(v.unknown for v in values):
            result = Text(f"$(printf {fmt.text} ...)", marks)
        else:
            try:
                result = Text(_printf(fmt.text, [v.text for v in values]), marks)
            except ValueError as ex:
                raise ScriptError(line, f"printf: {ex}", "") from None
        if target is not None:
            self.vars[target] = Text(result.text, result.marks | frozenset(self.control))
        elif self.pure:
            self.out.append(result)
        return 0, frozenset()

    def pure_command(self, name: str, args: list[Text], node: Simple) -> tuple[int, frozenset[Mark]]:
        """Inside `$(...)`: the few commands whose output import can know."""
        if any(a.unknown for a in args):
            raise Unknowable(name)
        texts = [a.text for a in args]
        opts = [t for t in texts if t.startswith("-") and t != "-"]
        operands = [t for t in texts if not t.startswith("-") or t == "-"]
        if "--" in texts:
            operands = texts[texts.index("--") + 1:]
        if name == "cd":
            target = operands[-1] if operands else None
            if target is None or not (os.path.isabs(target) or self.cwd):
                raise Unknowable("cd")
            self.cwd = os.path.normpath(os.path.join(self.cwd or "/", target))
        elif name == "pwd":
            if self.cwd is None:
                raise Unknowable("pwd")
            self.out.append(Text(self.cwd + "\n"))
        elif name in ("dirname", "basename") and len(operands) == 1:
            path = operands[0].rstrip("/") or "/"
            self.out.append(Text((os.path.dirname(path) or "." if name == "dirname" else os.path.basename(path))
                                 + "\n"))
        elif name in ("realpath", "readlink") and len(operands) == 1 and (name == "realpath" or "-f" in opts):
            path = operands[0]
            if not os.path.isabs(path) and self.cwd is None:
                raise Unknowable(name)
            self.out.append(Text(os.path.normpath(os.path.join(self.cwd or "/", path)) + "\n"))
        elif name == "seq" and 1 <= len(operands) <= 3 and all(re.fullmatch(r"-?\d+", t) for t in operands):
            nums = [int(t) for t in operands]
            first, step, last = (1, 1, nums[0]) if len(nums) == 1 else (nums[0], 1, nums[1]) if len(nums) == 2 \
                else tuple(nums)
            if step == 0 or abs((last - first) // step) > MAX_ITERATIONS:
                raise Unknowable("seq")
            values = range(first, last + (1 if step > 0 else -1), step)
            self.out.append(Text("".join(f"{v}\n" for v in values)))
        elif name == "cat" and not args and node.heredocs:
            doc = node.heredocs[-1]
            body = self.scalar(doc.body_word) if doc.expand and doc.body_word is not None else Text(doc.body)
            self.out.append(body)
        else:
            raise Unknowable(name)
        return 0, frozenset()

    def test(self, args: list[Text], line: int, src: str) -> tuple[int, frozenset[Mark]]:
        words = list(args)
        if words and words[-1].text in ("]", "]]"):
            words = words[:-1]
        marks: set[Mark] = set()
        for w in words:
            marks |= w.marks
        try:
            ok = _Test([w.seen for w in words], marks, line).run()
        except ValueError:
            return 2, frozenset(marks)
        return (0 if ok else 1), frozenset(marks)


class _Test:
    """`test` / `[` / `[[` over the words as bash sees them; file tests are unknown here (the
    script runs on another machine), so they are false with a mark."""

    UNARY = {"-z", "-n", "-f", "-d", "-e", "-r", "-w", "-x", "-s", "-L", "-h", "-v", "-p", "-S", "-b", "-c"}
    BINARY = {"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "=~"}

    def __init__(self, words: list[str], marks: set[Mark], line: int):
        self.w, self.i, self.marks, self.line = words, 0, marks, line

    def peek(self, n: int = 0) -> str | None:
        return self.w[self.i + n] if self.i + n < len(self.w) else None

    def run(self) -> bool:
        if not self.w:
            return False
        value = self.or_()
        if self.i != len(self.w):
            raise ValueError("trailing words")
        return value

    def _joined(self, ops: tuple[str, str], operand, combine) -> bool:
        value = operand()
        while self.peek() in ops:
            self.i += 1
            value = combine(value, operand())
        return value

    def or_(self) -> bool:
        return self._joined(("-o", "||"), self.and_, lambda a, b: a or b)

    def and_(self) -> bool:
        return self._joined(("-a", "&&"), self.not_, lambda a, b: a and b)

    def not_(self) -> bool:
        if self.peek() == "!" and self.peek(1) is not None:
            self.i += 1
            return not self.not_()
        if self.peek() == "(":
            self.i += 1
            value = self.or_()
            if self.peek() != ")":
                raise ValueError("unclosed (")
            self.i += 1
            return value
        return self.primary()

    def primary(self) -> bool:
        a = self.peek()
        if a is None:
            raise ValueError("missing operand")
        if self.peek(1) in self.BINARY and self.peek(2) is not None:
            op, b = self.peek(1), self.peek(2)
            self.i += 3
            return _compare(a, op, b)  # type: ignore[arg-type]
        if a in self.UNARY and self.peek(1) is not None:
            arg = self.peek(1)
            self.i += 2
            if a == "-z":
                return arg == ""
            if a == "-n":
                return arg != ""
            self.marks.add(Mark("cmd", f"[ {a} {arg} ]", self.line))  # a file on the machine that runs it
            return False
        self.i += 1
        return a != ""


def _compare(a: str, op: str, b: str) -> bool:
    if op in ("=", "=="):
        return fnmatch.fnmatchcase(a, b)
    if op == "!=":
        return not fnmatch.fnmatchcase(a, b)
    if op == "=~":
        return re.search(b, a) is not None
    if op in ("<", ">"):
        return a < b if op == "<" else a > b
    x, y = int(a), int(b)  # ValueError: bash's "integer expression expected" (status 2)
    return {"-eq": x == y, "-ne": x != y, "-lt": x < y, "-le": x <= y, "-gt": x > y, "-ge": x >= y}[op]


def _trim(s: str, pattern: str, op: str) -> str:
    n = len(s)
    if op in ("#", "##"):
        order = range(n + 1) if op == "#" else range(n, -1, -1)
        return next((s[i:] for i in order if fnmatch.fnmatchcase(s[:i], pattern)), s)
    order = range(n, -1, -1) if op == "%" else range(n + 1)
    return next((s[:i] for i in order if fnmatch.fnmatchcase(s[i:], pattern)), s)


def _printf(fmt: str, values: list[str]) -> str:
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
    spec = re.compile(r"%([-+ 0#]*\d*(?:\.\d+)?)([sdifxXoeEgGc%])")
    out: list[str] = []
    i = 0
    while True:
        used = 0

        def sub(m: re.Match) -> str:
            nonlocal i, used
            flags, conv = m.group(1), m.group(2)
            if conv == "%":
                return "%"
            v = values[i] if i < len(values) else ""
            i += 1
            used += 1
            if conv in "di":
                return ("%" + flags + "d") % int(v or 0)
            if conv in "xXo":
                return ("%" + flags + conv) % int(v or 0)
            if conv in "feEgG":
                return ("%" + flags + conv) % float(v or 0)
            return ("%" + flags + "s") % (v[:1] if conv == "c" else v)

        out.append(spec.sub(sub, fmt))
        if used == 0 or i >= len(values):
            return "".join(out)


def _short(src: str, n: int = 60) -> str:
    src = " ".join(src.split())
    return src if len(src) <= n else src[:n - 3] + "..."


def _cond_src(node: object) -> str:
    """A test's text as written, for the notes."""
    if isinstance(node, Simple):
        return node.src
    if isinstance(node, Seq):
        return "; ".join(_cond_src(item) for item in node.items)
    if isinstance(node, AndOr):
        return " ".join([_cond_src(node.first), *(f"{op} {_cond_src(n)}" for op, n in node.rest)])
    if isinstance(node, Pipeline):
        return ("! " if node.negate else "") + " | ".join(_cond_src(c) for c in node.commands)
    return "..."


def _order(m: Mark) -> tuple:
    return (m.line, m.kind, m.what)


def _simples(node: object) -> Iterator[Simple]:
    if isinstance(node, Simple):
        yield node
        return
    for value in vars(node).values() if hasattr(node, "__dict__") else ():
        items = value if isinstance(value, list) else [value]
        for item in items:
            for sub in (item if isinstance(item, tuple) else (item,)):
                if hasattr(sub, "__dict__") and not isinstance(sub, (Word, Mark, Text)):
                    yield from _simples(sub)


def _env_fix(marks: list[Mark]) -> str:
    names = sorted({m.what for m in marks if m.kind == "env"})
    if names:
        return "give " + " ".join(f"--env {n}=VALUE" for n in names) + " (the environment the script expects)"
    return "write the value into (a copy of) the script: import does not run commands"


def read_script(path: Path, env: dict[str, str], slime_root: Path | None) -> Reading:
    """Follow the script and return its one slime launch; ScriptError when it cannot be read."""
    try:
        raw = path.read_bytes()
    except OSError as ex:
        raise ScriptError(0, f"cannot read it: {ex.strerror or ex}", "check the path") from None
    if b"\0" in raw[:8192]:
        raise ScriptError(0, "is not a text file", "give a bash launch script (run-*.sh)")
    try:
        src = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ScriptError(0, "is not UTF-8 text", "give a bash launch script (run-*.sh)") from None
    try:
        tree = parse(src)
    except ParseError as ex:
        raise ScriptError(ex.line, ex.message, "import reads the bash subset of docs/import.md; rewrite this "
                          "line in a copy of the script") from None
    shell = Shell(path, env, slime_root)
    try:
        shell.run(tree)
    except ScriptExit as ex:
        if not shell.launches:
            why = _flatten(ex.marks)
            because = (" because " + ", ".join(m.describe() for m in sorted(why, key=_order))) if why else ""
            raise ScriptError(ex.line, f"the script stops here (`exit {ex.code.text}`) before it launches "
                              f"slime{because}", _env_fix(sorted(why, key=_order)) if why else
                              "import follows the script as bash would; remove the exit") from None
    except _Return:
        pass
    except arith.ArithError as ex:
        raise ScriptError(0, str(ex), "") from None
    if not shell.launches:
        raise ScriptError(0, f"launches no slime trainer: no `python3 {LAUNCH_FILES[0]} ...` (or "
                          f"{LAUNCH_FILES[1]}) command in it", "give a slime launch script (scripts/run-*.sh)")
    if len(shell.launches) > 1:
        lines = ", ".join(str(launch.line) for launch in shell.launches)
        raise ScriptError(shell.launches[1].line, f"the script launches slime {len(shell.launches)} times "
                          f"(lines {lines})", "import one launch at a time: keep one in a copy of the script")
    return Reading(path, shell.launches[0], shell.sourced, shell.notes, slime_root)
