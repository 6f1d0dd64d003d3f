"""What a run is trained from: its input paths (base model, reference model, prompt data), each by
its full resolved path plus a cheap content fingerprint, so two runs on different data never share
a run_id and a resume never continues on inputs that changed (docs/resume.md, "identity").

Fingerprint (chosen to be cheap on multi-GB inputs and stable under copies):
- a file: its size and the SHA-256 of its first MiB;
- a directory (an HF or Megatron checkpoint): the SHA-256 of the sorted (name, size) list of the
  files directly in it, plus the content of its `config.json` when there is one;
- a path this host cannot see (a remote cluster's filesystem): no fingerprint (None); the path alone
  counts, and the host that executes the run fingerprints it there.
mtime is not used: copying a dataset keeps its identity, touching it does not change it.
"""
from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

HEAD_BYTES = 1 << 20
MAX_DIR_ENTRIES = 10_000
# Dests whose inputs define what is trained (full path in the run_id; content checked on resume).
INPUT_DESTS = ("hf_checkpoint", "ref_load", "prompt_data")

# Which slime dests count in the run_id, each by name: `identity` lists the dests that do, `excluded`
# the ones that do not, grouped by why (layout, performance, engine, tracking, outputs, inputs, length).
# Reviewed against the argument table's commit; a dest in neither list (a table regenerated and not
# reviewed yet) counts in the identity: a changed run_id refuses a resume, a missed one would
# silently continue a different training. `python -m trainstack.upstream.sync_slime identity` keeps it
# in step with the table and names the new dests to review.
IDENTITY_PATH = Path(__file__).resolve().parents[1] / "data" / "run_identity.json"


@lru_cache(maxsize=1)
def identity_table() -> dict[str, Any]:
    with open(IDENTITY_PATH, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def excluded_dests() -> frozenset[str]:
    """Every dest left out of the run_id hash, by name."""
    return frozenset(d for group in identity_table()["excluded"].values() for d in group["dests"])


def why_excluded(dest: str) -> str | None:
    """Why a dest is left out of the run_id (None: it counts)."""
    for group in identity_table()["excluded"].values():
        if dest in group["dests"]:
            return str(group["why"])
    return None


def identity_path(path: str, roots: dict[str, str]) -> str:
    """How a path counts in the run_id: `<data_root>/rel/path` under a root (data and models move
    between machines with their root), else the full normalised path."""
    norm = os.path.normpath(path)
    for name, root in sorted(roots.items()):
        root = os.path.normpath(root)
        if norm == root or norm.startswith(root + os.sep):
            return f"<{name}>/{os.path.relpath(norm, root)}"
    return norm


def fingerprint(path: str) -> dict[str, Any] | None:
    """Content identity of a file or directory on this host; None when it is not visible here."""
    try:
        if os.path.isfile(path):
            h = hashlib.sha256()
            with open(path, "rb") as f:
                h.update(f.read(HEAD_BYTES))
            return {"kind": "file", "size": os.path.getsize(path), "head_sha256": h.hexdigest()}
        if os.path.isdir(path):
            h = hashlib.sha256()
            with os.scandir(path) as it:
                entries = sorted((e.name, e.stat().st_size) for e in it if e.is_file())[:MAX_DIR_ENTRIES]
            for name, size in entries:
                h.update(f"{name}\0{size}\n".encode())
            config = os.path.join(path, "config.json")
            if os.path.isfile(config):
                with open(config, "rb") as f:
                    h.update(f.read(HEAD_BYTES))
            return {"kind": "dir", "files": len(entries), "listing_sha256": h.hexdigest()}
    except OSError:
        return None
    return None


def inputs_of(args: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{dest: {"path": ..., "fingerprint": ...}} for the input dests a run sets."""
    return {d: {"path": args[d], "fingerprint": fingerprint(args[d])} for d in INPUT_DESTS
            if isinstance(args.get(d), str)}


def _short(rec: dict[str, Any] | None) -> str:
    if not rec:
        return "(not set)"
    fp = rec.get("fingerprint")
    if not fp:
        return f"{rec['path']} (content not visible here)"
    digest = fp.get("head_sha256") or fp.get("listing_sha256") or ""
    size = f"{fp['size']} bytes, " if "size" in fp else f"{fp.get('files')} files, "
    return f"{rec['path']} ({size}content {digest[:12]})"


def _record(rec: Any) -> dict[str, Any] | None:
    """A stored input record as written by `inputs_of`; one a damaged or hand-edited file left in another
    shape compares as an unreadable path (a change, named), never a traceback."""
    if rec is None:
        return None
    if not isinstance(rec, dict):
        return {"path": "(unreadable record)", "fingerprint": None}
    fp = rec.get("fingerprint")
    return {"path": str(rec.get("path", "(no path recorded)")), "fingerprint": fp if isinstance(fp, dict) else None}


def input_changes(before: dict[str, dict], after: dict[str, dict]) -> dict[str, tuple[str, str]]:
    """Inputs that differ: by content when both sides could fingerprint them (a moved but identical
    file is the same input), else by path. {dest: (before, after)} in words."""
    out = {}
    for dest in sorted(set(before) | set(after), key=str):
        a, b = _record(before.get(dest)), _record(after.get(dest))
        if a is None or b is None:
            if a != b:
                out[dest] = (_short(a), _short(b))
            continue
        fa, fb = a.get("fingerprint"), b.get("fingerprint")
        same = fa == fb if (fa and fb) else a.get("path") == b.get("path")
        if not same:
            out[dest] = (_short(a), _short(b))
    return out
