"""Which git commit a slime checkout is at, for display (logs, tables' meta): never to decide which
slime it is, which its content does (trainstack/upstream/identity.py, docs/slime_versions.md).

The commit is read from the checkout's own git metadata, without running git: `<root>/.git/HEAD` or
the `gitdir:` file a submodule or worktree has, through loose refs and `packed-refs`.
"""
from __future__ import annotations

import re
from pathlib import Path


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
