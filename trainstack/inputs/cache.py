"""The content-addressed cache under models_root / data_root, safe for runs sharing a node or volume.

Why: two runs started together on one node (or on nodes sharing a volume) must prepare an input
once, and an input a killed download or conversion left half-written must never be used.

An entry is a directory `<root>/.trainstack-cache/<kind>/<slug>-<key>/` whose key hashes what made
it (repo, commit sha, conversion argv, slime commit). Its completion marker `.complete.json` is
written last (atomically); a directory without it is a partial and is resumed (downloads) or
redone (conversions), never used. `<entry>.lock` serialises the builders (fcntl.flock: one
holder per entry, across processes; on network filesystems flock must be supported).
A run's input path (e.g. `models/Qwen3-4B`) is a symlink to a complete entry, switched atomically.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator

CACHE_DIR = ".trainstack-cache"
MARKER = ".complete.json"


def key_of(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "--", text).strip("-")[:80]


@dataclass(frozen=True)
class Entry:
    path: str

    @classmethod
    def at(cls, root: str, kind: str, name: str, *key_parts: Any) -> "Entry":
        return cls(os.path.join(root, CACHE_DIR, kind, f"{slug(name)}-{key_of(*key_parts)}"))

    @property
    def marker(self) -> str:
        return os.path.join(self.path, MARKER)

    def complete(self) -> dict[str, Any] | None:
        """The marker's record when the entry is complete, else None."""
        try:
            with open(self.marker, encoding="utf-8") as f:
                rec = json.load(f)
            return rec if isinstance(rec, dict) else None
        except (OSError, ValueError):
            return None

    def mark_complete(self, **record: Any) -> None:
        tmp = f"{self.marker}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({**record, "completed_at": time.time()}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.marker)

    @contextlib.contextmanager
    def lock(self) -> Iterator[bool]:
        """Hold the entry's lock; yields whether another holder made us wait."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        waited = False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                waited = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield waited
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def link(target: str, at: str) -> None:
    """Point `at` (a run's input path) at a complete cache entry, atomically. The link is relative: the
    volume holding both may be mounted elsewhere (a Lium volume read from the host, a bind mount)."""
    os.makedirs(os.path.dirname(at) or ".", exist_ok=True)
    target = os.path.relpath(target, os.path.dirname(os.path.abspath(at)))
    if os.path.islink(at) and os.readlink(at) == target:
        return
    tmp = f"{at}.link.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, at)


def managed(path: str) -> bool:
    """Is this input path ours to (re)point: missing, or a link into a trainstack cache?"""
    if not os.path.lexists(path):
        return True
    return os.path.islink(path) and CACHE_DIR in os.readlink(path).split(os.sep)
