"""The window of slime versions trainstack knows: one argument table each, found by the checkout's content.

Tables: the packaged pin (``trainstack/data/slime_args.json``), the packaged older releases
(``trainstack/data/slime_tables/<name>.json``, stored as a delta against the pin: a list entry that is an
integer is the pin's record at that index), and the ones ``trainstack slime sync`` wrote into the user
cache (``$TRAINSTACK_CACHE`` or ``$XDG_CACHE_HOME/trainstack`` or ``~/.cache/trainstack``, under
``slime/<fingerprint>/``). A checkout is a table's slime when the files the table lists in
``meta.slime_sources`` have exactly that content (``trainstack.upstream.identity``); the user cache is
searched first, so a table you built wins over a packaged one for the same content.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainstack.upstream import identity

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
PIN_TABLE = DATA_DIR / "slime_args.json"
SHIPPED_DIR = DATA_DIR / "slime_tables"
CACHE_ENV = "TRAINSTACK_CACHE"


def cache_root() -> Path:
    base = os.environ.get(CACHE_ENV)
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "trainstack"


def cache_dir() -> Path:
    """Where `trainstack slime sync` writes the tables it builds."""
    return cache_root() / "slime"


@dataclass(frozen=True)
class Known:
    """One table trainstack has: its name (`v0.3.0`, `624b824a`), file, and the slime content it is for."""

    name: str
    path: Path
    commit: str
    sources: tuple[tuple[str, str | None], ...]
    origin: str  # "packaged" | "cache"

    @property
    def label(self) -> str:
        short = self.commit[:8] if self.commit and self.commit != "unknown" else ""
        return f"slime {self.name}" + (f" ({short})" if short and not self.name.startswith(short) else "")


def _head(path: Path) -> dict[str, Any]:
    """A table's meta without reading its arguments (the first line of the packaged layout)."""
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    try:
        return json.loads(first.rstrip().rstrip(",").removesuffix(',"arguments":[') + "}")["meta"]
    except (ValueError, KeyError):
        return json.loads(Path(path).read_text(encoding="utf-8"))["meta"]


def _known(path: Path, origin: str) -> Known | None:
    try:
        meta = _head(path)
    except (OSError, ValueError, KeyError):
        return None
    sources = meta.get("slime_sources") or {}
    commit = str(meta.get("slime_commit") or "unknown")
    name = str(meta.get("slime_version") or commit[:8])
    return Known(name=name, path=path, commit=commit, sources=tuple(sorted(sources.items())), origin=origin)


def _cached_paths() -> list[Path]:
    root = cache_dir()
    return sorted(root.glob("*/slime_args.json")) if root.is_dir() else []


def known_tables() -> list[Known]:
    """The user cache's tables, then the packaged pin, then the packaged older releases."""
    out = [k for p in _cached_paths() if (k := _known(p, "cache"))]
    out += [k for p in [PIN_TABLE, *sorted(SHIPPED_DIR.glob("*.json"))] if (k := _known(p, "packaged"))]
    return out


def pin() -> Known:
    k = _known(PIN_TABLE, "packaged")
    assert k is not None, PIN_TABLE
    return k


def identify(root: str | Path) -> Known | None:
    """The table whose slime sources the checkout at ``root`` has, byte for byte; None when none does."""
    root = Path(root)
    for k in known_tables():
        if identity.matches(root, dict(k.sources)):
            return k
    return None


def read_table(path: str | Path) -> dict[str, Any]:
    """A table document, a packaged delta resolved against the pin."""
    return _read(str(path))


@lru_cache(maxsize=8)
def _read(path: str) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    base = doc["meta"].get("delta_of")
    if base:
        pin_args = _read(str(DATA_DIR / base))["arguments"]
        doc = {"meta": doc["meta"], "arguments": [pin_args[a] if isinstance(a, int) else a for a in doc["arguments"]]}
    return doc


def as_delta(doc: dict[str, Any], base: dict[str, Any], base_name: str) -> dict[str, Any]:
    """``doc`` with every record equal to one of ``base``'s replaced by that record's index."""
    index = {json.dumps(a, sort_keys=True): i for i, a in enumerate(base["arguments"])}
    args = [index.get(json.dumps(a, sort_keys=True), a) for a in doc["arguments"]]
    return {"meta": {**doc["meta"], "delta_of": base_name}, "arguments": args}
