"""Dry-run latency of `run.py experiment=qwen3-4B-grpo-dapo cluster=lium_8xh100 dry_run=true` against a
bare @hydra.main app composing the same config tree, and the time to dry-run a 256-point sweep.

The GPU recipe runs on a remote launcher (lium): its dry run is everything a launch does on this
machine (compose, validate, render, the run-dir and resume checks) with the GPU host's checks
deferred; with a local launcher it would stop at this CPU machine's missing slime checkout.

Targets (2-core CI machine): dry-run median <= 1.0 s and <= 1.3x the bare app; 256-point
sweep <= 30 s. Results go to benchmarks/results/dry_run.json.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "dry_run.json"
OVERRIDES = ["experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100"]

BARE_APP = f'''
import hydra
from omegaconf import OmegaConf

@hydra.main(config_path="{ROOT / 'conf'}", config_name="config", version_base="1.3")
def main(cfg):
    OmegaConf.to_container(cfg, resolve=True)

if __name__ == "__main__":
    main()
'''


def timed(argv: list[str], cwd: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    res = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if res.returncode:
        raise SystemExit(f"{argv} failed: {res.stderr}")
    return dt


def main() -> None:
    runs = int(os.environ.get("BENCH_RUNS", "15"))
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        # warm the page cache and .pyc files once
        timed([sys.executable, str(bare), *OVERRIDES], tmp)
        timed([sys.executable, str(ROOT / "run.py"), *OVERRIDES, "dry_run=true"], tmp)
        bare_t, ours_t = [], []
        for _ in range(runs):  # interleaved so machine noise hits both alike
            bare_t.append(timed([sys.executable, str(bare), *OVERRIDES], tmp))
            ours_t.append(timed([sys.executable, str(ROOT / "run.py"), *OVERRIDES, "dry_run=true"], tmp))
        lrs = ",".join(f"{i}e-7" for i in range(1, 17))
        seeds = ",".join(str(i) for i in range(1, 17))
        sweep_argv = [sys.executable, str(ROOT / "run.py"), "-m", *OVERRIDES, "dry_run=true",
                      f"algo.lr={lrs}", f"args.seed={seeds}", f"hydra.sweep.dir={tmp}/sweep"]
        sweep = timed(sweep_argv, tmp)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "runs": runs,
        "bare_hydra_median_s": round(statistics.median(bare_t), 3),
        "dry_run_median_s": round(statistics.median(ours_t), 3),
        "ratio": round(statistics.median(ours_t) / statistics.median(bare_t), 3),
        "sweep_256_s": round(sweep, 2),
        "targets": {"dry_run_median_s": 1.0, "ratio": 1.3, "sweep_256_s": 30},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
