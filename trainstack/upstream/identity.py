"""Which slime a checkout is, by the content of the files its argument table is read from.

A table records, in ``meta.slime_sources``, the git blob id (``git hash-object``) of every slime file
that defines arguments (the modules slime's parser code imported that call ``add_argument`` or
``set_defaults``). A checkout is that table's slime when each of those files has that content: no
git metadata, declared commit or environment variable is trusted over the files themselves, so a
container image, a copy, a patched checkout and a git worktree are all told apart correctly.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

# always part of the identity, even before a build has listed the rest
ARGUMENT_FILES = ("slime/utils/arguments.py", "slime/backends/sglang_utils/arguments.py")


def blob_id(data: bytes) -> str:
    """git's blob id of a file's bytes (what `git hash-object FILE` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_blob(root: Path, rel: str) -> str | None:
    try:
        return blob_id((root / rel).read_bytes())
    except OSError:
        return None


def argument_files(root: Path) -> list[str]:
    """The slime files imported in this process that define arguments (after a build), relative to root."""
    out = set(ARGUMENT_FILES)
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None)
        if not path or not (getattr(mod, "__name__", "") or "").startswith("slime"):
            continue
        try:
            rel = Path(path).resolve().relative_to(root.resolve()).as_posix()
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except (ValueError, OSError):
            continue
        if "add_argument" in text or "set_defaults" in text:
            out.add(rel)
    return sorted(out)


def source_blobs(root: Path, files: list[str] | None = None) -> dict[str, str | None]:
    """{file: blob id or None when absent} for the files that make a table (default: those imported)."""
    return {rel: file_blob(root, rel) for rel in (files if files is not None else argument_files(root))}


def matches(root: Path, sources: dict[str, str | None]) -> bool:
    return bool(sources) and all(file_blob(root, rel) == blob for rel, blob in sources.items())


def git_commit(root: Path) -> str | None:
    """The checkout's commit, for display only (never for identification)."""
    from trainstack.upstream.slime_version import head_commit

    return head_commit(root)
