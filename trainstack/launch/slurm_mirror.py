"""SLURM runs whose run dirs the submit host does not see (`cluster.slurm.shared_run_dirs=false`: the runs
root is a node's local disk, or a filesystem the login node does not mount).

The job cannot read the spec the submit host stored, and the submit host cannot read what the run writes.
So the spec travels in the job itself (submitit pickles the call into its folder, which SLURM jobs and the
submit host share, as submitit requires), the job writes it into the run dir on the node before
`trainstack exec`, and while the run trains the job copies the run's metrics.jsonl and status.json into
`<submitit folder>/<job id>_trainstack/` whenever they change (and once more at the end). `trainstack
status`, `compare` and a waited sweep (`Launcher.fetch_traces`) copy them from there into the run dir on
the submit host: the run's metrics and state are where the user looks, while it runs and after the job
is gone. Checkpoints stay on the node (resume from another node needs the Hub: docs/hub.md).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from trainstack.storage import layout

MIRRORED = (layout.METRICS, layout.STATUS)
SUFFIX = "_trainstack"
EVERY_S = 2.0  # the job copies changed files this often


def mirror_dir(stdout_log: str | Path, job_id: str) -> Path:
    """Where a job's copies go: beside its submitit log, named after its job id (an array task's: `12_3`)."""
    return Path(stdout_log).parent / f"{job_id}{SUFFIX}"


def _stamp(path: Path) -> tuple:
    try:
        st = path.stat()
        return st.st_size, st.st_mtime_ns
    except OSError:
        return ()


def copy_changed(src_dir: Path, dst_dir: Path) -> None:
    """Each mirrored file of src_dir whose size or time differs from dst_dir's, copied with its time (one rename)."""
    for name in MIRRORED:
        src, dst = src_dir / name, dst_dir / name
        stamp = _stamp(src)
        if not stamp or stamp == _stamp(dst):
            continue
        dst_dir.mkdir(parents=True, exist_ok=True)
        tmp = dst_dir / f".{name}.{os.getpid()}.tmp"
        try:
            shutil.copy2(src, tmp)
            os.replace(tmp, dst)
        except OSError:
            tmp.unlink(missing_ok=True)


def materialize(run_dir: str, spec_json: dict[str, Any]) -> None:
    """In the job: the spec the submit host stored, written into the run dir on this node (exec runs it)."""
    from trainstack.run.rundir import RunDir
    from trainstack.run.spec import RunSpec

    RunDir(run_dir).write_spec(RunSpec.from_json(spec_json, "the spec carried by the SLURM job"))


class Mirror:
    """In the job: the run dir's metrics and status, copied into the job's folder as they change."""

    def __init__(self, run_dir: str):
        import submitit

        env = submitit.JobEnvironment()
        self.src, self.dst = Path(run_dir), mirror_dir(env.paths.stdout, str(env.job_id))
        self.at = 0.0

    def sync(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.at >= EVERY_S:
            self.at = now
            copy_changed(self.src, self.dst)


def fetch(run_dir: str | Path) -> None:
    """On the submit host: a run's copies from its job's folder into its run dir here (a run whose run dir is
    shared has none: nothing to do)."""
    from trainstack.run.rundir import RunDir

    rd = RunDir(run_dir)
    rec = rd.read(layout.SLURM, {}) or {}
    stdout = (rec.get("logs") or {}).get("stdout")
    if not stdout or not rec.get("job_id"):
        return
    src = mirror_dir(stdout, str(rec["job_id"]))
    if src.is_dir():
        copy_changed(src, rd.path)
