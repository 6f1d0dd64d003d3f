"""Dry-run latency of `run.py experiment=qwen3-4B-grpo-dapo cluster=lium_8xh100 dry_run=true` against a
bare @hydra.main app composing the same config tree, and the time to dry-run a 256-point sweep.

The GPU recipe runs on a remote launcher (lium): its dry run is everything a launch does on this
machine (compose, validate, render, the run-dir and resume checks) with the GPU host's checks
deferred; with a local launcher it would stop at this CPU machine's missing slime checkout.

The bare app composes the same conf/ tree, so it loads trainstack's Hydra plugins too (the tree's
defaults name the trainstack sweeper and launcher). The sweep is a remote-launcher sweep
(`hydra/launcher=lium`): every point composed, validated, rendered and stored as a spec, with nothing
registered (dry_run=true). Also timed: `run.py --help` against `run.py --cfg job`.

Targets (2-core CI machine): dry-run median <= 1.0 s and <= 1.3x the bare app; 256-point sweep
<= 5 s; --help within 1.2x of --cfg job. Results go to benchmarks/results/dry_run.json.
Short mode (--quick): 2 runs each and a 16-point sweep, results elsewhere (benchmarks/benchlib.py).
"""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib  # noqa: E402  (benchmarks/ is on sys.path when the script runs)

ROOT = Path(__file__).resolve().parents[1]
OVERRIDES = ["experiment=qwen3-4B-grpo-dapo", "cluster=lium_8xh100", "cluster.lium.pod.image=you/trainstack-slime:0.1"]

BARE_APP = f'''
import hydra
from omegaconf import OmegaConf

@hydra.main(config_path="{ROOT / 'conf'}", config_name="config", version_base="1.3")
def main(cfg):
    OmegaConf.to_container(cfg, resolve=True)

if __name__ == "__main__":
    main()
'''


CPU: dict[str, float] = {}  # the last timed command's user + system CPU seconds (load-independent)


def timed(argv: list[str], cwd: str) -> float:
    import resource

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if res.returncode:
        raise SystemExit(f"{argv} failed: {res.stderr}")
    return dt


def main() -> None:
    quick = benchlib.quick()
    runs = int(os.environ.get("BENCH_RUNS", "2" if quick else "15"))
    side = 4 if quick else 16  # the sweep is side x side points
    run_py = [sys.executable, str(ROOT / "run.py")]
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        # warm the page cache and .pyc files once
        timed([sys.executable, str(bare), *OVERRIDES], tmp)
        timed([*run_py, *OVERRIDES, "dry_run=true"], tmp)
        bare_t, ours_t, help_t, cfg_t = [], [], [], []
        for _ in range(runs):  # interleaved so machine noise hits both alike
            bare_t.append(timed([sys.executable, str(bare), *OVERRIDES], tmp))
            ours_t.append(timed([*run_py, *OVERRIDES, "dry_run=true"], tmp))
            help_t.append(timed([*run_py, "--help"], tmp))
            cfg_t.append(timed([*run_py, "--cfg", "job"], tmp))
        lrs = ",".join(f"{i}e-7" for i in range(1, side + 1))
        seeds = ",".join(str(i) for i in range(1, side + 1))
        sweep_argv = [*run_py, "-m", "hydra/launcher=lium", *OVERRIDES, "dry_run=true",
                      f"algo.lr={lrs}", f"args.seed={seeds}", f"hydra.sweep.dir={tmp}/sweep"]
        sweep = timed(sweep_argv, tmp)
        sweep_cpu = CPU["last"]
    med = statistics.median
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "runs": runs,
        "bare_hydra_median_s": round(med(bare_t), 3),
        "dry_run_median_s": round(med(ours_t), 3),
        "ratio": round(med(ours_t) / med(bare_t), 3),
        "help_median_s": round(med(help_t), 3),
        "cfg_job_median_s": round(med(cfg_t), 3),
        "help_ratio": round(med(help_t) / med(cfg_t), 3),
        "sweep_points": side * side,
        "sweep_s": round(sweep, 2),
        "sweep_cpu_s": round(sweep_cpu, 2),
        "targets": {"dry_run_median_s": 1.0, "ratio": 1.3, "sweep_256_s": 5, "help_ratio": 1.2},
    }
    benchlib.write("dry_run.json", result)


if __name__ == "__main__":
    main()
