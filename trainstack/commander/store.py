"""The commander's state: one SQLite database in WAL mode, every change committed before it is
acknowledged, so `kill -9` at any moment loses nothing a client was told.

Per run: what should happen (`desired`: running | paused | cancelled), where it stands (`phase`),
the lease (epoch, holder, expiry), the current pod, restarts, progress (last checkpoint, Hub
commit, metrics), limits; every pod it ever rented (for cost: price x lifetime); an append-only
event history. The lease epoch only grows: the reconciler bumps it before renting a pod, and every
write from a worker names the epoch it holds, so a superseded worker can change nothing.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY,
  sweep TEXT,
  spec TEXT NOT NULL,
  settings TEXT NOT NULL,
  desired TEXT NOT NULL,
  phase TEXT NOT NULL,
  epoch INTEGER NOT NULL DEFAULT 0,
  lease_holder TEXT,
  lease_expires REAL,
  pod_id TEXT,
  volume_id TEXT,
  restarts INTEGER NOT NULL DEFAULT 0,
  restart_limit INTEGER NOT NULL DEFAULT 5,
  strikes INTEGER NOT NULL DEFAULT 0,
  strike_checkpoint INTEGER,
  capacity_wait_s REAL NOT NULL DEFAULT 3600,
  capacity_since REAL,
  purge INTEGER NOT NULL DEFAULT 0,
  ended REAL,
  next_attempt REAL NOT NULL DEFAULT 0,
  deadline REAL,
  spend_limit REAL,
  last_checkpoint INTEGER,
  last_hub_commit TEXT,
  progress TEXT NOT NULL DEFAULT '{}',
  exit_code INTEGER,
  message TEXT,
  log_tail TEXT,
  created REAL NOT NULL,
  updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS pods (
  pod_id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL,
  epoch INTEGER NOT NULL,
  name TEXT NOT NULL,
  price_per_hour REAL NOT NULL DEFAULT 0,
  rented REAL NOT NULL,
  removed REAL
);
CREATE INDEX IF NOT EXISTS pods_by_run ON pods(run_id);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id TEXT NOT NULL,
  time REAL NOT NULL,
  epoch INTEGER,
  event TEXT NOT NULL,
  data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_by_run ON events(run_id, id);
CREATE TABLE IF NOT EXISTS sweeps (
  sweep TEXT PRIMARY KEY,
  spend_limit REAL
);
"""

DESIRED = ("running", "paused", "cancelled")
# pending: waits for a pod (backoff); provisioning: renting/starting a pod for `epoch`; starting:
# the worker was started, its lease is awaited; running: a live lease; stopping: asked to stop
# (cancel/pause), waiting for the worker; lost: pod or lease gone, to be cleaned up and replaced.
ACTIVE_PHASES = ("pending", "provisioning", "starting", "running", "stopping", "lost")
TERMINAL_PHASES = ("finished", "failed", "cancelled", "paused")


class LazySpec(Mapping):
    """A run's stored spec, decoded from its JSON on first use: listing a thousand runs (the API, the
    reconciler's tick every second) reads no spec, and decoding each was most of a listing's time."""

    def __init__(self, text: str | None) -> None:
        self._text = text
        self._data: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        if self._data is None:
            self._data = json.loads(self._text or "{}")
        return self._data  # type: ignore[return-value]

    def __getitem__(self, key: str) -> Any:
        return self._decoded()[key]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __eq__(self, other: object) -> bool:
        return dict(self._decoded()) == (dict(other) if isinstance(other, Mapping) else other)

    __hash__ = None  # type: ignore[assignment]


@dataclass
class CommanderRun:
    """One run as the commander keeps it: its row of the `runs` table (+ its pods). The boundary it
    serves is the commander's store <-> its reconciler and API; `public()` is its JSON on the HTTP
    API (what `trainstack status` shows for a Lium run). Not the run dir's view of a run (RunDir,
    rundir/progress.Progress) nor compare's (compare.RunRecord): the commander never reads a run dir."""

    run_id: str
    sweep: str | None
    spec: Mapping[str, Any]  # a LazySpec when listed
    settings: dict[str, Any]
    desired: str
    phase: str
    epoch: int
    lease_holder: str | None
    lease_expires: float | None
    pod_id: str | None
    volume_id: str | None
    restarts: int
    restart_limit: int
    strikes: int  # restarts since the last progress (a newer checkpoint): what restart_limit bounds
    strike_checkpoint: int | None  # the last checkpoint when a strike was counted
    capacity_wait_s: float  # how long to keep waiting for a free node before the run is failed
    capacity_since: float | None  # when the run started waiting for a free node (None: not waiting)
    purge: int  # 1: delete the run's volume as soon as its pods are gone (`trainstack cancel --purge`)
    ended: float | None  # when the reconciler first saw the run finished/failed/cancelled (volume retention)
    next_attempt: float
    deadline: float | None
    spend_limit: float | None
    last_checkpoint: int | None
    last_hub_commit: str | None
    progress: dict[str, Any]
    exit_code: int | None
    message: str | None
    log_tail: str | None
    created: float
    updated: float
    cost_usd: float = 0.0
    pods: list[dict[str, Any]] = field(default_factory=list)

    def lease_live(self, now: float | None = None) -> bool:
        return bool(self.lease_holder) and (self.lease_expires or 0) > (time.time() if now is None else now)

    def public(self) -> dict[str, Any]:
        """What the API answers (no spec body: that is GET .../spec)."""
        d = {k: v for k, v in self.__dict__.items() if k not in ("spec", "log_tail")}
        d["lease_live"] = self.lease_live()
        return d


class Store:
    """Thread-safe access to the database (one connection, a lock, short transactions)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        self._migrate()
        self._lock = threading.RLock()
        try:
            self.path.chmod(0o600)
        except OSError:
            pass

    def _migrate(self) -> None:
        """Columns added after a database was made (a commander upgraded in place keeps its state)."""
        have = {r[1] for r in self._db.execute("PRAGMA table_info(runs)").fetchall()}
        for col, decl in (("strikes", "INTEGER NOT NULL DEFAULT 0"), ("strike_checkpoint", "INTEGER"),
                          ("capacity_wait_s", "REAL NOT NULL DEFAULT 3600"), ("capacity_since", "REAL"),
                          ("purge", "INTEGER NOT NULL DEFAULT 0"), ("ended", "REAL")):
            if col not in have:
                self._db.execute(f"ALTER TABLE runs ADD COLUMN {col} {decl}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction, committed (durably) when the block ends without an exception."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # ------------------------------------------------------------------ reads
    def run(self, run_id: str, with_pods: bool = True) -> CommanderRun | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                return None
            return self._record(row, with_pods)

    def runs(self, sweep: str | None = None, with_pods: bool = False) -> list[CommanderRun]:
        """Every run (of a sweep), specs left encoded until used (LazySpec); two queries whatever the count
        (the runs, then their pods), so the lock is held briefly while workers wait to renew."""
        with self._lock:
            if sweep is None:
                rows = self._db.execute("SELECT * FROM runs ORDER BY created, run_id").fetchall()
                pod_rows = self._db.execute("SELECT * FROM pods ORDER BY rented").fetchall()
            else:
                rows = self._db.execute("SELECT * FROM runs WHERE sweep=? ORDER BY created, run_id", (sweep,)).fetchall()
                pod_rows = self._db.execute("SELECT p.* FROM pods p JOIN runs r ON p.run_id = r.run_id "
                                            "WHERE r.sweep=? ORDER BY p.rented", (sweep,)).fetchall()
        pods: dict[str, list[sqlite3.Row]] = {}
        for p in pod_rows:
            pods.setdefault(p["run_id"], []).append(p)
        now = time.time()
        return [self._record(r, with_pods, pods.get(r["run_id"], []), now, lazy=True) for r in rows]

    def _record(self, row: sqlite3.Row, with_pods: bool, pods: list[sqlite3.Row] | None = None,
                now: float | None = None, lazy: bool = False) -> CommanderRun:
        d = dict(row)
        for k in ("settings", "progress"):
            d[k] = json.loads(d[k] or "{}")
        d["spec"] = LazySpec(d["spec"]) if lazy else json.loads(d["spec"] or "{}")
        rec = CommanderRun(**d)
        if pods is None:
            pods = self._db.execute("SELECT * FROM pods WHERE run_id=? ORDER BY rented", (rec.run_id,)).fetchall()
        now = time.time() if now is None else now
        rec.cost_usd = round(sum(p["price_per_hour"] * ((p["removed"] or now) - p["rented"]) / 3600.0 for p in pods), 6)
        if with_pods:
            rec.pods = [dict(p) for p in pods]
        return rec

    def listing_json(self, sweep: str | None = None, now: float | None = None) -> str:
        """`[r.public() for r in runs(sweep, with_pods=True)]` as JSON text, built by one SQL query
        (SQLite's JSON functions, in C): the listing of a thousand runs took the interpreter ~70 ms in
        Python, while every worker's renewal waited. tests/test_commander_policies.py compares the two."""
        with self._lock:
            cols = [r[1] for r in self._db.execute("PRAGMA table_info(runs)").fetchall()
                    if r[1] not in ("spec", "log_tail")]
            pod_cols = [r[1] for r in self._db.execute("PRAGMA table_info(pods)").fetchall()]
            fields = ", ".join(f"'{c}', " + (f"json(r.{c})" if c in ("settings", "progress") else f"r.{c}")
                               for c in cols)
            pod = ", ".join(f"'{c}', p.{c}" for c in pod_cols)
            sql = (
                "SELECT json_group_array(json(j)) FROM (SELECT json_object(" + fields + ", "
                "'cost_usd', round(coalesce((SELECT sum(p.price_per_hour * (coalesce(p.removed, :now) - p.rented) "
                "/ 3600.0) FROM pods p WHERE p.run_id = r.run_id), 0), 6), "
                "'pods', (SELECT json_group_array(json_object(" + pod + ")) FROM "
                "(SELECT * FROM pods p WHERE p.run_id = r.run_id ORDER BY p.rented) p), "
                "'lease_live', json(CASE WHEN coalesce(r.lease_holder, '') != '' AND coalesce(r.lease_expires, 0) > "
                ":now THEN 'true' ELSE 'false' END)) AS j FROM runs r"
                + (" WHERE r.sweep = :sweep" if sweep is not None else "") + " ORDER BY r.created, r.run_id)")
            row = self._db.execute(sql, {"now": time.time() if now is None else now, "sweep": sweep}).fetchone()
        return row[0] or "[]"

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def sweep_cost(self, sweep: str) -> float:
        with self._lock:
            rows = self._db.execute("SELECT p.price_per_hour, p.rented, p.removed FROM pods p JOIN runs r "
                                    "ON p.run_id = r.run_id WHERE r.sweep=?", (sweep,)).fetchall()
        now = time.time()
        return sum(r[0] * ((r[2] or now) - r[1]) / 3600.0 for r in rows)

    def sweep_limit(self, sweep: str) -> float | None:
        with self._lock:
            row = self._db.execute("SELECT spend_limit FROM sweeps WHERE sweep=?", (sweep,)).fetchone()
        return None if row is None else row[0]

    def events(self, run_id: str | None = None, after: int = 0, limit: int = 1000) -> list[dict[str, Any]]:
        with self._lock:
            if run_id is None:
                rows = self._db.execute("SELECT * FROM events WHERE id>? ORDER BY id LIMIT ?", (after, limit)).fetchall()
            else:
                rows = self._db.execute("SELECT * FROM events WHERE run_id=? AND id>? ORDER BY id LIMIT ?",
                                        (run_id, after, limit)).fetchall()
        return [{**dict(r), "data": json.loads(r["data"])} for r in rows]

    def open_pods(self) -> list[dict[str, Any]]:
        """Pods rented and not yet removed (what is still billing, as far as we know)."""
        with self._lock:
            return [dict(r) for r in self._db.execute("SELECT * FROM pods WHERE removed IS NULL").fetchall()]

    # ------------------------------------------------------------------ writes
    @staticmethod
    def event(db: sqlite3.Connection, run_id: str, event: str, epoch: int | None = None, **data: Any) -> None:
        db.execute("INSERT INTO events(run_id, time, epoch, event, data) VALUES (?,?,?,?,?)",
                   (run_id, time.time(), epoch, event, json.dumps(data, default=str)))

    @staticmethod
    def update(db: sqlite3.Connection, run_id: str, epoch: int | None = None, **fields: Any) -> bool:
        """Set fields of a run; with `epoch`, only if the run is still at that epoch (fenced)."""
        fields["updated"] = time.time()
        for k in ("progress", "settings", "spec"):
            if k in fields and not isinstance(fields[k], str):
                fields[k] = json.dumps(fields[k], default=str)
        sets = ", ".join(f"{k}=?" for k in fields)
        sql = f"UPDATE runs SET {sets} WHERE run_id=?" + (" AND epoch=?" if epoch is not None else "")
        args = [*fields.values(), run_id] + ([epoch] if epoch is not None else [])
        return db.execute(sql, args).rowcount == 1

    def add_pod(self, run_id: str, epoch: int, pod_id: str, name: str, price_per_hour: float) -> None:
        with self.tx() as db:
            db.execute("INSERT OR IGNORE INTO pods(pod_id, run_id, epoch, name, price_per_hour, rented) "
                       "VALUES (?,?,?,?,?,?)", (pod_id, run_id, epoch, name, price_per_hour, time.time()))

    def pod_removed(self, pod_id: str) -> None:
        with self.tx() as db:
            db.execute("UPDATE pods SET removed=? WHERE pod_id=? AND removed IS NULL", (time.time(), pod_id))

    def set_sweep_limit(self, sweep: str, limit: float | None) -> None:
        with self.tx() as db:
            db.execute("INSERT INTO sweeps(sweep, spend_limit) VALUES (?,?) ON CONFLICT(sweep) DO UPDATE SET "
                       "spend_limit=excluded.spend_limit", (sweep, limit))
