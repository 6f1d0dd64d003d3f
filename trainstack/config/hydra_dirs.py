"""`hydra.run.dir` / `hydra.sweep.dir` on the command line: checked before Hydra creates them, and a
run directory Hydra created for input trainstack then refused is removed again, so refused input
writes nothing (issue #36: `hydra.run.dir=/proc/x` ended in a FileNotFoundError traceback, and a
valid new directory stayed behind for a refused run)."""
from __future__ import annotations

import os
import re
from pathlib import Path

from trainstack.errors import ConfigError

DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir")
_TOKEN = re.compile(r"^\+{0,2}(?P<key>hydra\.(?:run|sweep)\.dir)=(?P<value>.*)$")


def given(overrides: list[str]) -> dict[str, str]:
    """{key: literal path} of the directory overrides (interpolated ones are Hydra's to resolve)."""
    out = {}
    for tok in overrides:
        m = _TOKEN.match(tok)
        if m and "${" not in m.group("value"):
            out[m.group("key")] = m.group("value").strip("'\"")
    return out


def problem(key: str, path: str) -> ConfigError | None:
    """Why Hydra could not create (or use) `path` as a directory."""
    from trainstack.terminal.output_files import cannot_create_in

    fix = f"set {key} to a writable directory (the default . writes nothing there)"
    if not path.strip():
        return ConfigError(key, "is empty", fix, value=path)
    p = Path(path).expanduser()
    if p.exists():
        return None if p.is_dir() else ConfigError(key, f"{path} is a file, not a directory", fix, value=path)
    base = p.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        return ConfigError(key, f"{base} is a file, so {path} cannot be created", fix, value=path)
    why = "" if os.access(base, os.W_OK | os.X_OK) else "permission denied"
    why = why or cannot_create_in(base)
    return ConfigError(key, f"{path} cannot be created in {base} ({why})", fix, value=path) if why else None


def missing(path: str) -> list[Path]:
    """The directories of `path` that do not exist yet, outermost first."""
    out: list[Path] = []
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        out.insert(0, p)
        p = p.parent
    return out


def remove_if_empty(created: list[Path]) -> None:
    """Undo what Hydra created for a refused run: the empty directories it made, innermost first."""
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:
            return  # not empty (something else wrote there) or already gone: leave the rest
