"""metrics.jsonl relayed from where a run trains (a Lium pod) to the run dir its user reads (the submit host).

The worker on the pod sends what its run dir's metrics.jsonl gained since the commander's copy (a chunk:
byte offset + text, complete lines, at most CHUNK_BYTES) with every lease renewal and its last report; the
commander keeps the copy in its database (table `run_metrics`), so it outlives the pod; `trainstack status`,
`compare` and a waited sweep pull what the submit host's copy lacks (`GET /v1/runs/{id}/metrics?offset=`).
The pod's file is the truth: a worker that starts (a new pod, a restarted trainer) or finds the file
shorter sends it again from offset 0, and a chunk at offset 0 replaces the copy. Text is the file's bytes as
latin-1, so offsets are byte offsets on every side.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

CHUNK_BYTES = 512 * 1024
SCHEMA = "CREATE TABLE IF NOT EXISTS run_metrics (run_id TEXT PRIMARY KEY, text TEXT NOT NULL DEFAULT '')"


def chunk(path: str | Path, offset: int, limit: int | None = None) -> dict[str, Any] | None:
    """What the file holds past `offset`, complete lines only; None: nothing new. From 0, even when that is
    nothing, when the file is shorter than `offset` (rewritten) or `offset` is negative (a worker that just
    started: the commander's copy may be an older pod's)."""
    limit = limit or CHUNK_BYTES
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            whole = offset < 0 or size < offset
            offset = 0 if whole else offset
            if size == offset and not whole:
                return None
            f.seek(offset)
            data = f.read(limit)
    except FileNotFoundError:
        data, whole, offset = b"", offset < 0, 0
    except OSError:
        return None
    cut = data.rfind(b"\n") + 1
    if cut == 0 and not whole:
        return None  # a line still being written (or one longer than a chunk: never, for metrics records)
    return {"offset": offset, "text": data[:cut].decode("latin-1")}


def merge(stored: str, offset: int, text: str) -> str:
    """The commander's copy after a chunk: replaced from 0, extended at its end, cut and extended before it;
    a chunk past the end (a gap) changes nothing (the answer's size tells the worker where to resume)."""
    if offset > len(stored):
        return stored
    return stored[:offset] + text


def receive(db: sqlite3.Connection, run_id: str, got: Any) -> int:
    """Merge a worker's chunk into the run's copy (inside the caller's transaction); the copy's size."""
    db.execute(SCHEMA)
    row = db.execute("SELECT text FROM run_metrics WHERE run_id=?", (run_id,)).fetchone()
    stored = row[0] if row else ""
    if isinstance(got, dict) and isinstance(got.get("offset"), int) and isinstance(got.get("text"), str) \
            and got["offset"] >= 0:
        new = merge(stored, got["offset"], got["text"])
        if new != stored or row is None:
            db.execute("INSERT INTO run_metrics(run_id, text) VALUES (?,?) ON CONFLICT(run_id) DO UPDATE SET "
                       "text=excluded.text", (run_id, new))
            stored = new
    return len(stored)


def stored_text(db: sqlite3.Connection, run_id: str) -> str:
    db.execute(SCHEMA)
    row = db.execute("SELECT text FROM run_metrics WHERE run_id=?", (run_id,)).fetchone()
    return row[0] if row else ""


def write_local(run_dir: str | Path, offset: int, text: str) -> None:
    """The commander's copy from `offset` into the run dir's metrics.jsonl: appended at its end, or the whole
    file replaced (offset 0) in one rename, so a reader never sees half of it."""
    from trainstack.storage import layout
    from trainstack.storage.files import temp_name

    path = Path(run_dir) / layout.METRICS
    data = text.encode("latin-1")
    if offset:
        with open(path, "ab") as f:
            f.write(data)
        return
    tmp = temp_name(path)
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
