"""Which slime commit a checkout is at, and whether it is the one the argument table was read from.

Everything trainstack knows about slime's flags (the argument table, the model presets, the ported
checks) is a fact about one commit (`trainstack/data/slime_args.json`, `meta.slime_commit`). A
checkout at another commit may accept other flags, or ignore ones trainstack renders, so the host
that runs the trainer refuses it (docs/validation.md, "slime version").

The commit is read from the checkout's own git metadata, without running git (a sweep checks every
point): `<root>/.git/HEAD` or the `gitdir:` file a submodule or worktree has, through loose refs and
`packed-refs`. A copy without git metadata (a container image) may declare its commit in
`$TRAINSTACK_SLIME_COMMIT` (docker/Dockerfile sets it); git metadata wins when both exist.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from trainstack.errors import ConfigError

DECLARED_ENV = "TRAINSTACK_SLIME_COMMIT"
_SHA = re.compile(r"^[0-9a-f]{7,40}$")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def git_dir(root: Path) -> Path | None:
    """The git directory of a checkout whose top is `root` (never a parent repository's)."""
    dot = root / ".git"
    if dot.is_dir():
        return dot
    text = _read(dot) if dot.is_file() else None
    if text and text.startswith("gitdir:"):
        target = Path(text[len("gitdir:"):].strip())
        return target if target.is_absolute() else root / target  # the kernel resolves `..` (symlinks too)
    return None


def _ref_dirs(gitdir: Path) -> list[Path]:
    """Where refs live: the git dir, and the common dir of a worktree."""
    common = _read(gitdir / "commondir")
    if not common:
        return [gitdir]
    cpath = Path(common)
    return [gitdir, cpath if cpath.is_absolute() else gitdir / cpath]


def _resolve_ref(gitdir: Path, ref: str, depth: int = 0) -> str | None:
    for d in _ref_dirs(gitdir):
        loose = _read(d / ref)
        if loose:
            if loose.startswith("ref:") and depth < 5:
                return _resolve_ref(gitdir, loose[4:].strip(), depth + 1)
            return loose if _SHA.match(loose) else None
    for d in _ref_dirs(gitdir):
        packed = _read(d / "packed-refs") or ""
        for line in packed.splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and _SHA.match(sha):
                return sha
    return None


def head_commit(root: str | Path) -> str | None:
    """The commit a git checkout at `root` has checked out; None without readable git metadata."""
    gitdir = git_dir(Path(root))
    head = _read(gitdir / "HEAD") if gitdir else None
    if not gitdir or not head:
        return None
    if head.startswith("ref:"):
        return _resolve_ref(gitdir, head[4:].strip())
    return head if _SHA.match(head) else None


def checkout_commit(root: str | Path) -> tuple[str | None, str]:
    """(commit, how it is known) of the slime checkout at `root`; (None, why not) when unknown."""
    commit = head_commit(root)
    if commit:
        return commit, "its git HEAD"
    declared = os.environ.get(DECLARED_ENV, "").strip().lower()
    if declared:
        return declared, f"${DECLARED_ENV}"
    return None, f"no git metadata in {root} and ${DECLARED_ENV} is not set"


def same_commit(a: str, b: str) -> bool:
    """Full or abbreviated (at least 7 hex digits) commits name the same commit."""
    a, b = a.lower(), b.lower()
    return len(min(a, b, key=len)) >= 7 and (a.startswith(b) or b.startswith(a))


def version_problems(root: str | Path, table_commit: str, key: str = "slime.root") -> list[ConfigError]:
    """The checkout at `root` must be at the argument table's commit (one error naming both, and the fix)."""
    commit, how = checkout_commit(root)
    regenerate = (f"regenerate the table from it with `python -m trainstack.tools.sync_slime args --slime-root {root}` "
                  f"(then `... presets`)")
    if commit is None:
        return [ConfigError(key, f"cannot tell which slime commit {root} is at ({how}), so it cannot be checked "
                            f"against the commit trainstack's argument table was read from ({table_commit})",
                            f"use a git checkout of slime at {table_commit} (`git submodule update --init slime`), "
                            f"or declare the checkout's commit: export {DECLARED_ENV}=<commit>", value=str(root))]
    if same_commit(commit, table_commit):
        return []
    return [ConfigError(key, f"the slime checkout {root} is at commit {commit} ({how}), but trainstack's argument "
                        f"table was read from slime {table_commit}: flags, defaults and checks may differ from what "
                        "this slime accepts",
                        f"pin slime to {table_commit} (`git -C {root} checkout {table_commit}`, or `git submodule "
                        f"update --init slime` in the trainstack checkout), or {regenerate}", value=str(root))]
