"""A launch's argv read as slime's parsers read it: one value per dest, from the argument table.

Every option string of the table is known with its own action (aliases, `--no-x`, deprecated
spellings), values are taken by nargs as argparse takes them (a value starting with `-` that is not a
negative number ends them) and converted by the dest's type, so two argvs that slime parses the same
way compare equal here whatever their order or spelling. The script's argv and the rendered one
both go through `parse`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trainstack.script_import.shell import Mark, Token
from trainstack.upstream import argtable as at

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse's _negative_number_matcher
_SWITCHES = {"_StoreTrueAction": True, "DeprecatedStoreTrueAction": True, "_StoreFalseAction": False}


@dataclass
class Flag:
    """One dest as the argv sets it."""

    dest: str
    option: str  # as written
    value: Any
    line: int
    tokens: list[str]  # the value tokens as written
    marks: frozenset[Mark] = frozenset()


@dataclass
class Problem:
    line: int
    message: str
    fix: str
    value: str | None = None


@dataclass
class Parsed:
    flags: dict[str, Flag] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unknown: dict[str, Flag] = field(default_factory=dict)  # dests whose value import cannot know

    def values(self) -> dict[str, Any]:
        return {d: f.value for d, f in self.flags.items()}


@lru_cache(maxsize=1)
def actions() -> dict[str, dict]:
    """option string -> the table's action for it (each option string is in one action)."""
    with open(at.TABLE_PATH, encoding="utf-8") as f:
        raw = json.load(f)["arguments"]
    return {opt: a for a in raw for opt in a["option_strings"]}


def is_option(text: str) -> bool:
    return text.startswith("-") and len(text) > 1 and not _NEGATIVE_NUMBER.match(text)


def convert(spec: at.ArgSpec, text: str) -> Any:
    """One token as slime's type for the dest gets it; ValueError when slime's parser would refuse it."""
    kind = spec.value_kind
    if kind == at.INT:
        return int(text)
    if kind == at.FLOAT:
        value = float(text)
        return int(value) if re.fullmatch(r"-?\d+", text) else value
    if kind == at.BOOL:
        return bool(text)  # argparse type=bool: any non-empty text is True
    if kind == at.JSON:
        return json.loads(text)
    return text


def _count(nargs: Any) -> tuple[int, int | None]:
    """(least, most) values an action takes."""
    if nargs in (None, 1, "1"):
        return 1, 1
    if nargs == "?":
        return 0, 1
    if nargs == "*":
        return 0, None
    if nargs == "+":
        return 1, None
    n = int(nargs)
    return n, n


def parse(tokens: list[Token], what: str = "the launch") -> Parsed:
    """argv tokens -> dests; problems name the line of each token slime's parsers would not take."""
    table = at.load_table()
    acts = actions()
    out = Parsed()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        text = tok.text.text
        if not is_option(text) or tok.text.unknown:
            direct = tok.text.unknown
            alone = {f"${m.what}" for m in direct} | {f"${{{m.what}}}" for m in direct}
            if direct and all(m.kind == "env" for m in direct) and text in alone:
                out.notes.append(f"line {tok.line}: {text} is not set in the script and stands alone in the argv: "
                                 f"read as empty (give --env {direct[0].what}=... to set it)")
            elif direct:
                out.problems.append(Problem(tok.line, f"cannot tell what `{text}` in {what} is: it depends on "
                                            + ", ".join(m.describe() for m in direct), fix_for(direct), text))
            else:
                out.problems.append(Problem(tok.line, f"`{text}` in {what} follows no flag that takes it",
                                            "check the flag before it: it may take no value or fewer values", text))
            i += 1
            continue
        option, eq, inline = text.partition("=")
        action = acts.get(option)
        if action is None:
            cands = [table.specs[d].flag for d in table.suggest(option) if d in table.specs]
            out.problems.append(Problem(tok.line, f"{option} is not an argument of slime {table.slime_commit[:8]} "
                                        "(slime's parsers would silently ignore it)",
                                        at.did_you_mean(cands) or "remove it (slime never reads it)", option))
            i += 1
            while i < len(tokens) and not is_option(tokens[i].text.text):
                i += 1  # its values
            continue
        dest = action["dest"]
        spec = table.specs[dest]
        kind = action["action"]
        marks = tok.text.marks
        if action.get("nargs") == 0 or kind in _SWITCHES or kind == "BooleanOptionalAction":
            if eq:
                out.problems.append(Problem(tok.line, f"{option} takes no value (`{text}`)", f"write {option} alone",
                                            text))
                i += 1
                continue
            if kind == "BooleanOptionalAction":
                value: Any = not option.startswith("--no-")
            elif kind in _SWITCHES:
                value = _SWITCHES[kind]
            else:
                value = action.get("const")
            _store(out, Flag(dest, option, value, tok.line, [], marks), append=False)
            i += 1
            continue
        least, most = _count(action.get("nargs"))
        values: list[Token] = []
        j = i + 1
        if eq:
            values = [Token(type(tok.text)(inline, tok.text.marks), tok.line)]
        else:
            while j < len(tokens) and (most is None or len(values) < most) and not is_option(tokens[j].text.text):
                values.append(tokens[j])
                j += 1
        if len(values) < least:
            out.problems.append(Problem(tok.line, f"{option} needs {'a value' if least == 1 else f'{least} values'}"
                                        + (f"; `{tokens[j].text.text}` starts with '-', so slime's parser reads it as "
                                           "a flag" if j < len(tokens) else ""),
                                        f"give {option} its value (a value starting with '-' as {option}=VALUE)",
                                        text))
            i = j
            continue
        i = j
        for v in values:
            marks = marks | v.text.marks
        unknown = sorted({m for v in values for m in v.text.unknown}, key=lambda m: (m.line, m.what))
        texts = [v.text.text for v in values]
        if unknown:
            out.unknown[dest] = Flag(dest, option, None, tok.line, texts, frozenset(marks))
            continue
        try:
            converted = [convert(spec, t) for t in texts]
        except (ValueError, json.JSONDecodeError):
            out.problems.append(Problem(tok.line, f"{option} {' '.join(texts)}: slime reads it as "
                                        f"{spec.value_kind}, which this is not", f"fix the value of {option}",
                                        " ".join(texts)))
            continue
        choices = spec.choice_values()
        bad = [v for v in converted if choices is not None and v not in choices and str(v) not in map(str, choices)]
        if bad:
            out.problems.append(Problem(tok.line, f"{option} {bad[0]}: not one of slime's choices "
                                        f"({', '.join(map(str, choices or ()))})", f"pick one for {option}",
                                        str(bad[0])))
            continue
        single = most == 1 and action.get("nargs") in (None, "?", 1, "1") and not (spec.is_list and spec.kind != at.APPEND)
        value = (converted[0] if converted else action.get("const")) if single else converted
        _store(out, Flag(dest, option, value, tok.line, texts, frozenset(marks)), append=kind == "_AppendAction")
    return out


def _store(out: Parsed, flag: Flag, append: bool) -> None:
    old = out.flags.get(flag.dest)
    if append:
        flag.value = [*(old.value if old else []), flag.value]
    elif old is not None and old.value != flag.value:
        from trainstack.secrets import is_secret_name

        last = "<redacted>" if is_secret_name(flag.dest) else repr(flag.value)
        out.notes.append(f"line {flag.line}: {flag.option} is given again (first at line {old.line}); slime takes "
                         f"the last, {last}")
    out.unknown.pop(flag.dest, None)
    out.flags[flag.dest] = flag


def fix_for(marks: list[Mark]) -> str:
    names = sorted({m.what for m in marks if m.kind == "env"})
    if names:
        return "give " + " ".join(f"--env {n}=VALUE" for n in names) + " (what the script reads from its environment)"
    return "write the value into (a copy of) the script: import does not run commands"


def from_argv(argv: list[str]) -> Parsed:
    """A rendered argv (plain strings) read the same way."""
    from trainstack.script_import.shell import Text

    return parse([Token(Text(t), 0) for t in argv], "the rendered argv")


def same(spec: at.ArgSpec | None, a: Any, b: Any) -> bool:
    """Whether two values of a dest are the same to slime: numbers by value, paths without a trailing
    `/`, lists item by item. A preset value with an interpolation (`${paths.data_root}/...`) is never
    the same as a script's: what it resolves to depends on the run."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(spec, x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, str):
        if "${" in a or "${" in b:
            return False
        return a == b or (a.rstrip("/") == b.rstrip("/") and a.rstrip("/") != "")
    if isinstance(a, str) != isinstance(b, str) and spec is not None and a is not None and b is not None:
        try:  # a string value of a typed dest against the typed value
            return same(None, convert(spec, a) if isinstance(a, str) else a, convert(spec, b) if isinstance(b, str) else b)
        except (ValueError, json.JSONDecodeError):
            return False
    return bool(a == b)
