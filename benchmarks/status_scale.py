"""`trainstack status` and `trainstack compare` over sweeps of 100 and 1,000 runs: time, CPU, peak memory.

One CPU smoke run is trained with `run.py` (or `--source-run DIR` is used), then linked into N run
directories of one sweep manifest, each with its own run id, learning rate and spec (files that stay
the same are hard links, the ones that differ are written anew). Each copy's summary.json is written as
its lifecycle writes it (trainstack/run/rundir/summary.py), where the timed tree has one. Each command runs
once to warm the page cache, then `reps` times; medians of wall and CPU seconds and the peak RSS
(wait4) are recorded, per size, with the reference measured in the same run: the same command over 100
runs (the per-run cost is the slope from 100 to 1,000) and `python -m trainstack --help` (the floor).
Targets (2-core machine): status over 1,000 runs <= 1 s, compare of a 1,000-run sweep <= 3 s, memory
flat in the runs. Writes benchmarks/results/status_scale.json. `BENCH_TREE=DIR` times another checkout.
Short mode (--quick): a 2-rollout run, 4 and 16 copies, 1 timing. Everything lives in one temp dir.
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
TREE = Path(os.environ.get("BENCH_TREE") or ROOT).resolve()


def env() -> dict[str, str]:
    return benchlib.tree_env(TREE, COLUMNS="200")


def train(tmp: Path, num_rollout: int) -> Path:
    res = subprocess.run([sys.executable, str(TREE / "run.py"), f"env.num_rollout={num_rollout}", "run_id=source",
                          f"paths.runs_root={tmp}/runs", f"paths.data_root={tmp}/data"], cwd=tmp, env=env(),
                         capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"training the source run failed:\n{res.stderr[-3000:]}")
    return tmp / "runs" / "source"


def _rewrite(path: Path, text: str) -> None:
    path.unlink()  # a hard link: the source's file must stay as it is
    path.write_text(text)


def copies(src: Path, root: Path, n: int) -> Path:
    """n run dirs of one sweep, each src with its own run id, lr and spec; the sweep dir."""
    runs = []
    for i in range(n):
        rid = f"copy-{i:04d}"
        d = root / "runs" / rid
        shutil.copytree(src, d, copy_function=os.link, ignore=shutil.ignore_patterns("lease.json", "summary.json"))
        command = json.loads((d / "command.json").read_text())
        command["run_id"] = rid
        _rewrite(d / "command.json", json.dumps(command))
        lr = 0.001 * (1 + i)
        spec = json.loads((d / "spec.json").read_text())
        spec.update(run_id=rid, run_dir=str(d))
        spec["args"].update(save=str(src / "checkpoints"), load=str(src / "checkpoints"), lr=lr)
        spec["config"]["algo"]["lr"] = lr
        _rewrite(d / "spec.json", json.dumps(spec))
        args = json.loads((d / "args.json").read_text())
        _rewrite(d / "args.json", json.dumps({**args, "lr": lr}))
        _rewrite(d / "config.yaml", (d / "config.yaml").read_text().replace("lr: 0.001", f"lr: {lr}"))
        runs.append({"run_id": rid, "run_dir": str(d), "overrides": [f"algo.lr={lr}"], "job_num": i})
    sweep = root / "multirun" / "copies"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"sweep_dir": str(sweep), "runs": runs}))
    if (TREE / "trainstack" / "run" / "rundir" / "summary.py").exists():  # what each run's lifecycle writes
        code = ("import sys\nfrom trainstack.run.rundir.summary import refresh\n"
                "for d in sys.argv[1:]:\n    refresh(d)\n")
        subprocess.run([sys.executable, "-c", code, *[r["run_dir"] for r in runs]], env=env(), check=True)
    return sweep


def timed(argv: list[str], cwd: Path, reps: int) -> dict:
    benchlib.run_process(argv, cwd, env())  # the page cache
    got = [benchlib.run_process(argv, cwd, env()) for _ in range(reps)]
    med = statistics.median
    return {"wall_s": round(med(g["wall_s"] for g in got), 3), "cpu_s": round(med(g["cpu_s"] for g in got), 3),
            "peak_rss_mib": round(max(g["peak_rss_mib"] for g in got), 1), "lines": got[0]["lines"]}


def main() -> int:
    import argparse

    quick = benchlib.quick()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source-run", default=None, help="a finished run directory to copy (default: train one)")
    a = p.parse_args()
    num_rollout, sizes, reps = (2, [4, 16], 1) if quick else (100, [100, 1000], 3)
    load_before = [round(x, 2) for x in os.getloadavg()]
    ts = [sys.executable, "-m", "trainstack"]
    result: dict = {"tree": str(TREE), "sizes": sizes, "reps": reps}
    with tempfile.TemporaryDirectory(prefix="bench-status-") as tmp_s:
        tmp = Path(tmp_s)
        t0 = time.perf_counter()
        src = Path(a.source_run).resolve() if a.source_run else train(tmp, num_rollout)
        result["train_source_s"] = round(time.perf_counter() - t0, 1)
        result["rollouts_per_run"] = json.loads((src / "spec.json").read_text())["args"]["num_rollout"]
        result["floor_help"] = timed([*ts, "--help"], tmp, reps)
        for n in sizes:
            sweep = copies(src, tmp / f"n{n}", n)
            result[str(n)] = {"status": timed([*ts, "status", str(sweep)], tmp, reps),
                              "compare": timed([*ts, "compare", str(sweep)], tmp, reps)}
            if result[str(n)]["status"]["lines"] < n:
                raise SystemExit(f"status printed {result[str(n)]['status']['lines']} lines for {n} runs")
            shutil.rmtree(tmp / f"n{n}")
    small, big = result[str(sizes[0])], result[str(sizes[1])]
    for cmd in ("status", "compare"):
        result[f"{cmd}_per_run_cpu_ms"] = round(1000 * (big[cmd]["cpu_s"] - small[cmd]["cpu_s"]) / (sizes[1] - sizes[0]), 3)
        result[f"{cmd}_peak_rss_ratio"] = round(big[cmd]["peak_rss_mib"] / small[cmd]["peak_rss_mib"], 3)
    result["load_average_before"] = load_before
    result["targets"] = {"status_1000_s": 1.0, "compare_1000_s": 3.0, "memory": "flat in the number of runs"}
    benchlib.write("status_scale.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
