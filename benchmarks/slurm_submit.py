#!/usr/bin/env python3
"""SLURM benchmarks on the local one-node cluster (`scripts/slurm-local.sh up`, root):

1. sweep submission: `python run.py -m hydra/launcher=slurm ...` with 64 points (`args.seed=range(0,64)`),
   held (`--hold`, so nothing runs) and cancelled after; once with one job per point (job name = run_id,
   singleton) and once with `hydra.launcher.array=true` (one sbatch array). Reported: the wall time of
   the whole command (Python start, Hydra, compose+validate of 64 points, submission) and the
   launcher's own time from the manifest.
2. requeue-to-resume: a tiny run checkpointing every rollout is preempted with submitit's
   `_interrupt()` (SIGTERM + USR2 -> checkpoint() -> scontrol requeue); reported: seconds from the
   signal to the run's `resume` event (requeue delay of the tuned scheduler + job start + resume plan).

Writes benchmarks/results/slurm.json.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
RESULTS = ROOT / "benchmarks" / "results" / "slurm.json"


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"),
                                                           os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


def run_py(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run([PY, str(ROOT / "run.py"), *args], cwd=cwd, env=env(), capture_output=True, text=True,
                       timeout=300)
    return time.perf_counter() - t0, r


def cancel(target: str, cwd: Path) -> None:
    subprocess.run([PY, "-m", "trainstack.cli.main", "cancel", target], cwd=cwd, env=env(), capture_output=True)


def bench_submit(work: Path, points: int, array: bool) -> dict:
    name = f"sweep-{'array' if array else 'jobs'}"
    wall, r = run_py(["-m", "hydra/launcher=slurm", f"hydra.launcher.array={str(array).lower()}",
                      "+hydra.launcher.additional_parameters.hold=true", f"hydra.sweep.dir={name}",
                      "env.num_rollout=3", f"args.seed=range(0,{points})"], work)
    if r.returncode != 0:
        raise SystemExit(f"submission failed:\n{r.stderr[-3000:]}")
    manifest = json.loads((work / name / "sweep.json").read_text())
    cancel(name, work)
    ids = {x["job_id"] for x in manifest["runs"]}
    return {"points": len(manifest["runs"]), "mode": manifest["mode"], "distinct_job_ids": len(ids),
            "sbatch_calls": 1 if array else len(manifest["runs"]),
            "command_wall_s": round(wall, 2), "launcher_s": manifest["submit_s"]}


def latest_ckpt(run_dir: Path) -> int:
    try:
        return int((run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
    except (OSError, ValueError):
        return -1


def bench_requeue(work: Path) -> dict:
    import submitit

    _, r = run_py(["cluster.launcher=slurm", "env.num_rollout=400", "args.save_interval=1", "run_id=requeue-bench"],
                  work)
    if r.returncode != 0:
        raise SystemExit(f"submission failed:\n{r.stderr[-3000:]}")
    rec = json.loads((work / "runs" / "requeue-bench" / "slurm.json").read_text())
    run_dir = Path(rec["run_dir"])
    deadline = time.monotonic() + 120
    while latest_ckpt(run_dir) < 5:
        if time.monotonic() > deadline:
            raise SystemExit("the run never checkpointed")
        time.sleep(0.1)
    at = latest_ckpt(run_dir)
    t0 = time.monotonic()
    submitit.SlurmJob(folder=rec["submitit_folder"], job_id=rec["job_id"])._interrupt()
    resumed = None
    while time.monotonic() - t0 < 300:
        evs = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines() if ln.strip()]
        resumed = next((e for e in evs if e["event"] == "resume"), None)
        if resumed:
            break
        time.sleep(0.2)
    t_resume = time.monotonic() - t0
    cancel("requeue-bench", work)
    if not resumed:
        raise SystemExit("the requeued job never resumed")
    return {"checkpoint_at_interrupt": at, "resumed_from_rollout": resumed["from_rollout"],
            "interrupt_to_resume_s": round(t_resume, 1)}


def main() -> int:
    if shutil.which("sbatch") is None:
        print("no sbatch: run `scripts/slurm-local.sh up` (root) first", file=sys.stderr)
        return 2
    import benchlib

    quick = benchlib.quick()  # short mode: 4 jobs each way, no requeue (benchmarks/benchlib.py)
    n = 4 if quick else 64
    with tempfile.TemporaryDirectory(prefix="ts-slurm-bench-") as tmp:
        work = Path(tmp)
        results = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "slurm": subprocess.run(["sbatch", "--version"], capture_output=True, text=True).stdout.strip(),
                        "scheduler": "scripts/slurm-local.sh (cred_expire=10, sched_interval=5, bf_interval=5)"},
            "submit_64_jobs": bench_submit(work, n, array=False),
            "submit_64_array": bench_submit(work, n, array=True),
            "requeue_to_resume": None if quick else bench_requeue(work),
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
    benchlib.write(RESULTS.name, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
