"""Why a trainer exited non-zero, told plainly: the plugin (or module) at fault and the first line of
its error, read from the run's log (the full traceback stays there).

The trainer's last Python traceback in `logs/trainer.log` is parsed; the failing plugin dest is the
one whose module a frame runs in or the error names (`No module named 'my_rm'`), or whose slime call
site a frame stands on (trainstack/upstream/plugin_contract.py cites each: a plain function awaited fails in
slime's `rm_hub`, not in the plugin). Without a plugin, the innermost frame outside libraries is named.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TAIL_BYTES = 256 * 1024  # the end of the log holds the last traceback
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)')
_ERROR = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)|AssertionError|KeyError)"
                    r"(: (?P<msg>.*))?$")
_LIBRARY = ("site-packages", "dist-packages", "/lib/python", "<frozen")


@dataclass(frozen=True)
class Cause:
    error: str  # "ModuleNotFoundError: No module named 'my_rm'"
    key: str = ""  # the config key of the plugin at fault (args.custom_rm_path), if one is
    plugin: str = ""  # its dotted value
    where: str = ""  # file:line of the innermost frame outside libraries

    def describe(self, log: str) -> str:
        who = f"{self.key} ({self.plugin}): " if self.key else (f"at {self.where}: " if self.where else "")
        return f"{who}{self.error} (full traceback: {log})"


def last_traceback(text: str) -> tuple[list[tuple[str, int]], str] | None:
    """(frames as (file, line), the exception line) of the last traceback in `text`."""
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return None
    frames: list[tuple[str, int]] = []
    error = ""
    for line in text[start:].splitlines()[1:]:
        m = _FRAME.match(line)
        if m:
            frames.append((m["file"], int(m["line"])))
            continue
        if line.startswith((" ", "\t")) or not line.strip():
            continue
        if _ERROR.match(line.strip()) or ":" in line:
            error = line.strip()
            break
    return (frames, error) if error else None


def plugin_dests(args: dict[str, Any]) -> list[tuple[str, str]]:
    from trainstack.upstream.plugin_contract import CONTRACTS

    out = []
    for dest in CONTRACTS:
        value = args.get(dest)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and "." in v:
                out.append((dest, v))
    return out


def _module_file(module: str, file: str) -> bool:
    tail = module.replace(".", os.sep)
    f = file.replace("/", os.sep)
    return f.endswith(tail + ".py") or f.endswith(os.path.join(tail, "__init__.py"))


def _at_call_site(dest: str, file: str, line: int, group_rm: bool) -> bool:
    from trainstack.upstream.plugin_contract import contract_for

    c = contract_for(dest, group_rm)
    if c is None:
        return False
    path, _, span = c.source.rpartition(":")
    first, _, last = span.partition("-")
    return file.replace(os.sep, "/").endswith("/" + path) and int(first) <= line <= int(last or first)


def cause(text: str, args: dict[str, Any], key_of: Any) -> Cause | None:
    """The cause of the last traceback in `text`, or None when there is none."""
    found = last_traceback(text)
    if found is None:
        return None
    frames, error = found
    own = [(f, n) for f, n in frames if not any(part in f for part in _LIBRARY)]
    where = f"{own[-1][0]}:{own[-1][1]}" if own else (f"{frames[-1][0]}:{frames[-1][1]}" if frames else "")
    plugins = plugin_dests(args)
    group_rm = bool(args.get("group_rm"))
    for dest, value in plugins:  # the plugin's own module failed (imported, or ran)
        module = value.rpartition(".")[0]
        top = module.split(".")[0]
        named = re.search(rf"No module named '({re.escape(module)}|{re.escape(top)})[.']", error + "'")
        if named or any(_module_file(module, f) for f, _ in frames):
            return Cause(error, key_of(dest), value, where)
    for f, n in reversed(frames):  # slime's call of a plugin failed there (awaited a plain function, ...)
        for dest, value in plugins:
            if _at_call_site(dest, f, n, group_rm):
                return Cause(error, key_of(dest), value, f"{f}:{n}")
    return Cause(error, where=where)


def from_log(log: Path, args: dict[str, Any], key_of: Any) -> Cause | None:
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    return cause(text, args, key_of)


def key_from_source(dest: str, source: str) -> str:
    """How the user wrote a dest, from where its value came (a spec keeps the sources, not the layers)."""
    m = re.match(r"command line `\+*([\w.]+)=", source)
    if m:
        return m[1]
    m = re.match(r"conf/(\w+)/", source)
    if m and m[1] in ("model", "algo", "env"):
        return f"{m[1]}.{dest}"
    return f"args.{dest}"


def failure_reason(spec: Any, log: Path) -> str | None:
    """status.json's `error` for a trainer that exited non-zero with a traceback in its log."""
    found = from_log(log, spec.args, lambda dest: key_from_source(dest, spec.arg_sources.get(dest, "")))
    return found.describe(str(log)) if found is not None else None
