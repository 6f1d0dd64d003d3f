"""`trainstack compare` and `trainstack status` over a sweep of 64 real 800-rollout runs, as whole
processes (what a user waits for).

One CPU smoke run is trained with `run.py` (800 rollouts: TensorBoard files, metrics.jsonl, checkpoints,
spec, the lot), then copied into 64 run directories of one sweep manifest, each with its own run id and
learning rate (checkpoints linked, not copied). Each command runs 3 times after a warm-up; the median is
quoted. Targets (2-core machine): compare <= 3 s, status <= 1 s.
Writes benchmarks/results/compare_status.json. Short mode (--quick): a 10-rollout run, 4 copies, 1 timing.
`--source-run DIR` copies an existing run directory instead of training one (a 800-rollout run takes
minutes on 2 cores).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

ROOT = Path(__file__).resolve().parents[1]


def train(tmp: Path, num_rollout: int) -> Path:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_API_KEY": ""}
    res = subprocess.run([sys.executable, str(ROOT / "run.py"), f"env.num_rollout={num_rollout}", "run_id=source",
                          f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data"], cwd=tmp, env=env,
                         capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"training the source run failed:\n{res.stderr[-3000:]}")
    return tmp / "runs" / "source"


def copies(src: Path, root: Path, n: int) -> Path:
    """n run dirs of one sweep, each src with its own run id and lr; the sweep dir."""
    runs = []
    for i in range(n):
        rid = f"copy-{i:02d}"
        d = root / "runs" / rid
        shutil.copytree(src, d, ignore=shutil.ignore_patterns("checkpoints", "lease.json"))
        (d / "checkpoints").symlink_to(src / "checkpoints")
        command = json.loads((d / "command.json").read_text())
        command["run_id"] = rid
        (d / "command.json").write_text(json.dumps(command))
        spec = json.loads((d / "spec.json").read_text())
        spec.update(run_id=rid, run_dir=str(d))
        spec["args"].update(save=str(d / "checkpoints"), load=str(d / "checkpoints"))
        (d / "spec.json").write_text(json.dumps(spec))
        lr = 0.001 * (1 + i)
        (d / "config.yaml").write_text((d / "config.yaml").read_text().replace("lr: 0.001", f"lr: {lr}"))
        runs.append({"run_id": rid, "run_dir": str(d), "overrides": [f"algo.lr={lr}"], "job_num": i})
    sweep = root / "multirun" / "copies"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"sweep_dir": str(sweep), "runs": runs}))
    return sweep


def timed(argv: list[str], reps: int, cpu: list[float] | None = None) -> list[float]:
    """Wall seconds of each counted run; `cpu` gets each run's user + system CPU seconds."""
    import resource

    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    out = []
    for i in range(reps + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        res = subprocess.run(argv, env=env, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if i and cpu is not None:
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if res.returncode:
            raise SystemExit(f"{' '.join(argv)} exited {res.returncode}:\n{res.stderr[-3000:]}")
        if i:  # the first run warms the page cache and .pyc files
            out.append(dt)
    return out


def main() -> int:
    import argparse

    quick = benchlib.quick()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source-run", default=None, help="a finished run directory to copy (default: train one)")
    a = p.parse_args()
    num_rollout, n, reps = (10, 4, 1) if quick else (800, 64, 3)
    with tempfile.TemporaryDirectory(prefix="compare-status-") as tmp:
        t0 = time.perf_counter()
        src = Path(a.source_run).resolve() if a.source_run else train(Path(tmp), num_rollout)
        train_s = time.perf_counter() - t0
        if a.source_run:
            num_rollout = json.loads((src / "spec.json").read_text())["args"]["num_rollout"]
        sweep = copies(src, Path(tmp) / "sweep", n)
        size = sum(p.stat().st_size for p in (sweep.parent.parent / "runs").rglob("*") if p.is_file())
        ts = [sys.executable, "-m", "trainstack"]
        compare_cpu: list[float] = []
        status_cpu: list[float] = []
        compare = timed([*ts, "compare", str(sweep)], reps, compare_cpu)
        status = timed([*ts, "status", str(sweep)], reps, status_cpu)
    result = {"runs": n, "rollouts_per_run": num_rollout, "bytes_per_run": size // n, "reps": reps,
              "train_source_s": round(train_s, 1),
              "compare_median_s": round(statistics.median(compare), 3), "compare_s": [round(x, 3) for x in compare],
              "status_median_s": round(statistics.median(status), 3), "status_s": [round(x, 3) for x in status],
              "compare_cpu_median_s": round(statistics.median(compare_cpu), 3),
              "status_cpu_median_s": round(statistics.median(status_cpu), 3),
              "targets": {"compare_s": 3.0, "status_s": 1.0}}
    benchlib.write("compare_status.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
