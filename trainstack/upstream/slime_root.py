"""Where slime's source is: one answer for the CPU backend, every host check and the tiny trainer.

A pip-installed trainstack has no `slime/` submodule beside it, so "where is slime" must be asked
the same way everywhere (docs/install.md, "slime"). `resolve` turns `slime.root` into the checkout a
run uses: the value given (relative: from the directory you launch in); unset, `$TRAINSTACK_SLIME_ROOT`
(docker/Dockerfile sets it), then `$SLIME_ROOT`, then `./slime` where you launch when it exists (and is not slime's own package, as inside a checkout), then
the `slime/` submodule of the trainstack checkout this code runs from (so `python run.py` works from
any directory of a clone), else `./slime` (which the dry run refuses with `fetch_fix`). The launch
hands the answer to the tiny trainer in `$TRAINSTACK_SLIME_ROOT` (trainstack/render/command.py).
"""
from __future__ import annotations

import os
from pathlib import Path

ENV = "TRAINSTACK_SLIME_ROOT"  # the tiny trainer reads it; the container image sets it
ALT_ENV = "SLIME_ROOT"  # conf's older spelling, same meaning
URL = "https://github.com/THUDM/slime.git"  # .gitmodules' (tests/test_packaging.py keeps them equal)
SOURCE_MARK = ("slime", "__init__.py")  # a checkout's Python package: what the tiny backend imports


def checkout_submodule() -> Path | None:
    """The `slime/` submodule of the trainstack checkout this code runs from; None when pip-installed."""
    project = Path(__file__).resolve().parents[2]
    return project / "slime" if (project / ".gitmodules").is_file() else None


def resolve(root: object, cwd: str | Path) -> str:
    """The absolute slime checkout for `slime.root` (None: unset), by the rule in the module doc."""
    root = None if root is None else str(root)  # as composed: a YAML number is refused later, by the schema
    given = root or os.environ.get(ENV) or os.environ.get(ALT_ENV)
    if given:
        return _absolute(given, cwd)
    here = Path(_absolute("slime", cwd))
    sub = checkout_submodule()
    if (here.exists() and not (here / "__init__.py").is_file()) or sub is None:  # (inside a checkout, ./slime is
        # slime's Python package, not a checkout)
        return str(here)
    return str(sub)


def _absolute(path: str, cwd: str | Path) -> str:
    p = Path(os.path.expanduser(path))
    if p.is_absolute():
        return str(p)
    try:
        return os.path.realpath(Path(cwd) / p)
    except (ValueError, OSError):  # a NUL byte, a loop: the host checks name it as written
        return str(Path(cwd) / p)


def has_source(root: str | Path) -> bool:
    return Path(root).joinpath(*SOURCE_MARK).is_file()


def fetch_fix(root: str | Path, commit: str) -> str:
    """The exact commands that put slime's source at `root`, at `commit` (the argument table's)."""
    root = Path(root)
    sub = checkout_submodule()
    fill = (f"`git submodule update --init slime` in {sub.parent} (or `make install` there, which does it; offline: "
            f"`make install SLIME_BUNDLE=/path/slime-{commit[:8]}.bundle`)") if sub is not None else ""
    if sub is not None and root == sub:
        return f"fill the trainstack checkout's submodule: {fill}, or point slime.root at a slime checkout of your own"
    clone = (f"`git clone {URL} {root} && git -C {root} checkout {commit}`, then run with slime.root={root} (or "
             f"`export {ENV}={root}`); a slime checkout you already have at that commit works the same way")
    return clone + (f"; or use the trainstack checkout's own: {fill}, with slime.root unset" if fill else "")
