"""slime's argv, parsed by a parser generated from the argument table.

Every option string slime accepts is registered (aliases, ``--no-x``, deprecated ones), values
are converted by the table's value kind and checked against choices, and anything else is
one ``ConfigErrors`` with a did-you-mean. Unlike slime (which silently ignores unknown
flags, slime.md §1.3) a typo is an error here. Abbreviations are not accepted.
"""
from __future__ import annotations

import argparse
import copy
import functools
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from trainstack.upstream.argtable import ArgSpec, ArgTable, did_you_mean, load_table
from trainstack.errors import ConfigError, ConfigErrors



@dataclass
class ParsedArgv:
    """The parse result at the boundary: slime-shaped ``args`` plus what the user set."""

    args: argparse.Namespace
    explicit: set[str] = field(default_factory=set)  # dests named on argv
    ignored: list[str] = field(default_factory=list)  # flags accepted but not honoured


class _ParseFailure(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit; we collect instead
        raise _ParseFailure(message)


def _bool(text: str) -> bool:
    t = str(text).strip().lower()
    if t in ("1", "true", "yes", "y", "on"):
        return True
    if t in ("0", "false", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expects true/false, got {text!r}")


def _converter(value_kind: str):
    def conv(text: str):
        try:
            if value_kind == "int":
                return int(text)
            if value_kind == "float":
                return float(text)
            if value_kind == "bool":
                return _bool(text)
            if value_kind == "json":
                return json.loads(text)
        except (ValueError, json.JSONDecodeError):
            kind = {"int": "an integer", "float": "a number", "json": "a JSON value"}.get(value_kind, value_kind)
            raise argparse.ArgumentTypeError(f"expects {kind}, got {text!r}") from None
        return text

    conv.__name__ = value_kind
    return conv


def _load_raw_actions() -> list[dict]:
    return load_table().raw_arguments


def build_parser(argv: Sequence[str] | None = None) -> _Parser:
    """One argparse action per recorded slime action; only explicitly given dests land in the namespace.
    Built once per process and table (1,400 actions take ~30 ms; parsing does not change the parser).
    With `argv`: only the actions whose option strings argv names, which parse argv exactly as the whole
    parser does (abbreviations are off, and a table without single-dash options has no `-xVALUE`
    forms), in ~1 ms: a launch's preflight, and each point of a sweep, parse one argv."""
    table = load_table()
    if argv is None or _has_short_options(table):
        return _build_parser(table)
    named = {t.split("=", 1)[0] for t in argv if t.startswith("-")}
    return _build_parser(table, tuple(i for i, a in enumerate(table.raw_arguments)
                                      if any(o in named for o in a["option_strings"])))


@functools.lru_cache(maxsize=2)
def _has_short_options(table: ArgTable) -> bool:
    return any(not o.startswith("--") for a in table.raw_arguments for o in a["option_strings"])


@functools.lru_cache(maxsize=16)
def _build_parser(table: ArgTable, only: tuple[int, ...] | None = None) -> _Parser:
    p = _Parser(prog="python -m trainstack.tiny.train", add_help=False, allow_abbrev=False,
                argument_default=argparse.SUPPRESS)
    for a in table.raw_arguments if only is None else [table.raw_arguments[i] for i in only]:
        spec = table.specs[a["dest"]]
        opts = [o for o in a["option_strings"] if o.startswith("-")]
        act = a["action"]
        kw: dict[str, Any] = {"dest": a["dest"]}
        if act in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
            p.add_argument(*opts, action="store_const", const=True, **kw)
        elif act == "_StoreFalseAction":
            p.add_argument(*opts, action="store_const", const=False, **kw)
        elif act in ("DeprecatedStoreConstAction", "DeprecatedAction") and a.get("nargs") == 0:
            p.add_argument(*opts, action="store_const", const=a.get("const"), **kw)
        elif act == "BooleanOptionalAction":
            pos = [o for o in opts if not o.startswith("--no-")]
            neg = [o for o in opts if o.startswith("--no-")]
            p.add_argument(*pos, action="store_const", const=True, **kw)
            p.add_argument(*neg, action="store_const", const=False, **kw)
        else:
            nargs = a.get("nargs")
            if isinstance(nargs, str) and nargs.isdigit():
                nargs = int(nargs)
            if nargs == 0:
                nargs = None
            if nargs is not None:
                kw["nargs"] = nargs
            kw["type"] = _converter(spec.value_kind)
            p.add_argument(*opts, action="append" if act == "_AppendAction" else "store", **kw)
    return p


def _flag(spec: ArgSpec) -> str:
    return spec.flag


def _check_choices(spec: ArgSpec, value: Any) -> ConfigError | None:
    allowed = spec.choice_values()
    if allowed is None or value is None:
        return None
    values = value if isinstance(value, list) else [value]
    allowed_s = {str(c) for c in allowed}
    for v in values:
        if str(v) not in allowed_s:
            return ConfigError(_flag(spec), f"{v!r} is not one of its choices", value=v, source="command line",
                               fix="use one of: " + ", ".join(str(c) for c in allowed))
    return None


def parse_argv(argv: list[str]) -> ParsedArgv:
    """argv -> full slime namespace (table defaults + argv) or ConfigErrors; no validation of meaning."""
    table = load_table()
    errors: list[ConfigError] = []
    try:
        ns, extras = build_parser(argv).parse_known_args(list(argv))
    except _ParseFailure as e:
        msg = str(e)
        raise ConfigErrors([ConfigError("argv", msg, fix="check the flag's value (see docs/tiny_trainer.md)",
                                        source="command line")]) from None
    after_unknown = False
    for tok in extras:
        if tok.startswith("-") and len(tok) > 1 and not _looks_number(tok):
            name = tok.split("=", 1)[0]
            prefixed = sorted(f for f in table.flag_to_dest if f.startswith(name))
            if 0 < len(prefixed) <= 3:  # slime's SGLang parser would take the abbreviation; we want full names
                cands, note = prefixed, " (abbreviations are not accepted)"
            else:
                cands, note = [table.specs[d].flag for d in table.suggest(name) if d in table.specs], ""
            errors.append(ConfigError(name, "unknown flag: slime has no such argument", source="command line",
                                      fix=(did_you_mean(cands) + note) if cands else
                                      "see docs/tiny_trainer.md; every flag of slime's argument table is accepted"))
            after_unknown = True
        elif after_unknown:
            continue  # the unknown flag's own value(s): one message per unknown flag is enough
        else:
            errors.append(ConfigError("argv", f"unexpected value {tok!r} (no flag takes it)", source="command line",
                                      fix="check the flag before it: it may take no value or fewer values"))
    explicit = set(vars(ns))
    for dest in explicit:
        err = _check_choices(table.specs[dest], getattr(ns, dest))
        if err:
            errors.append(err)
    if errors:
        raise ConfigErrors(errors)
    defaults, mutable = _defaults()
    full = argparse.Namespace()
    full.__dict__.update(defaults)
    for dest in mutable:  # the trainer may change what it gets
        setattr(full, dest, copy.deepcopy(defaults[dest]))
    for dest in explicit:
        setattr(full, dest, getattr(ns, dest))
    return ParsedArgv(args=full, explicit=explicit)


@functools.lru_cache(maxsize=1)
def _defaults() -> tuple[dict[str, Any], tuple[str, ...]]:
    """slime's defaults by dest (JSON-valued ones decoded), and the dests whose default is a list or
    dict (callers copy those)."""
    out: dict[str, Any] = {}
    for dest, default, value_kind in load_table().defaults():
        if default == "==SUPPRESS==":
            continue
        if isinstance(default, (list, dict)):
            default = json.loads(json.dumps(default))
        if value_kind == "json" and isinstance(default, str):
            try:
                default = json.loads(default)
            except json.JSONDecodeError:
                pass
        out[dest] = default
    return out, tuple(d for d, v in out.items() if isinstance(v, (list, dict)))


def _looks_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def usage() -> str:
    return (
        "usage: python -m trainstack.tiny.train <slime train.py flags>\n"
        "Accepts every flag slime accepts; see docs/tiny_trainer.md for what is honoured, ignored and refused."
    )
