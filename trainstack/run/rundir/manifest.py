"""The sweep manifest (`<sweep_dir>/sweep.json`): one schema, one reader, one writer.

Runs are keyed by run_id: writing a point again (a sweeper's next batch, a relaunched sweep)
replaces its entry. Writers take an exclusive lock on the sweep dir, so two sweeps sharing a
sweep dir (or an Optuna sweeper's batches) never lose each other's entries.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from trainstack.run.rundir import atomic_write, locked, now_iso, read_json
from trainstack.storage import layout

MANIFEST_VERSION = 1


@dataclass
class SweepRun:
    """One point of a sweep."""

    run_id: str
    run_dir: str
    overrides: list[str] = field(default_factory=list)
    job_num: int | None = None
    job_id: str | None = None  # the scheduler's id (SLURM), None for local points
    job_name: str | None = None
    logs: dict[str, str] = field(default_factory=dict)
    sbatch: str | None = None  # dry SLURM sweeps: the header that would be submitted

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SweepRun":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class SweepManifest:
    sweep_dir: str
    scheduler: str = "local"  # local | slurm
    runs: list[SweepRun] = field(default_factory=list)
    created_at: str = field(default_factory=now_iso)
    mode: str = "jobs"  # jobs | array | dry
    wait: bool = False
    submitit_folder: str | None = None
    submit_s: float = 0.0
    manifest_version: int = MANIFEST_VERSION

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["runs"] = [{k: v for k, v in asdict(r).items() if v is not None or k == "job_id"} for r in self.runs]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SweepManifest":
        known = set(cls.__dataclass_fields__) - {"runs"}
        out = cls(**{k: v for k, v in d.items() if k in known and k != "runs"})
        out.runs = [SweepRun.from_json(r) for r in d.get("runs") or [] if isinstance(r, dict) and r.get("run_dir")]
        return out


def read(sweep_dir: str | Path) -> SweepManifest | None:
    data = read_json(Path(sweep_dir) / layout.SWEEP_MANIFEST)
    if not isinstance(data, dict):
        return None
    try:
        return SweepManifest.from_json({"sweep_dir": str(Path(sweep_dir).absolute()), **data})
    except TypeError:  # fields of the wrong shape: run/rundir/check.py names them for the commands that read it
        return None


def record(sweep_dir: str | Path, runs: Sequence[SweepRun], *, scheduler: str, mode: str = "jobs",
           wait: bool = False, submitit_folder: str | None = None, submit_s: float = 0.0) -> Path:
    """Add (or replace, by run_id) these points in the sweep's manifest."""
    sweep = Path(sweep_dir).absolute()
    with locked(sweep / layout.SWEEP_LOCK):
        current = read(sweep) or SweepManifest(sweep_dir=str(sweep), scheduler=scheduler)
        new_ids = {r.run_id for r in runs}
        current.runs = [r for r in current.runs if r.run_id not in new_ids] + list(runs)
        current.scheduler, current.mode, current.wait = scheduler, mode, wait
        current.submitit_folder = submitit_folder or current.submitit_folder
        current.submit_s = round(float(current.submit_s or 0) + submit_s, 3)
        path = sweep / layout.SWEEP_MANIFEST
        atomic_write(path, json.dumps(current.to_json(), indent=1) + "\n")
    return path
